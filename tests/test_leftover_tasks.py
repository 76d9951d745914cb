"""The suite's leftover-task check: an async test that leaves a task running fails, by name.

Run in a throwaway pytest session (pytester) with this suite's conftest, so the check is
shown to fail on a leak and to pass when the test stops what it starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

LEAKY = """
import asyncio

async def test_leaks():
    asyncio.create_task(asyncio.sleep(3600), name="forgotten sleeper")

async def test_stops_what_it_starts():
    task = asyncio.create_task(asyncio.sleep(3600), name="owned sleeper")
    task.cancel()
    await asyncio.wait([task])

def test_sync_tests_are_left_alone():
    pass
"""


def test_a_task_left_running_fails_the_test(pytester: pytest.Pytester, repo: Path) -> None:
    pytester.makeconftest((repo / "tests" / "conftest.py").read_text())
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_leaky=LEAKY)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*tasks left running after the test: 'forgotten sleeper'*"])
