"""Suite-wide settings and checks.

``repo`` says where the repository is, so tests never depend on the working folder. Every
async test must leave no task running on its loop once its fixtures are torn down (as kopf's
suite checks): a task nobody stops is a task that outlives its owner in production too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(autouse=True)
def _no_asyncio_pending_tasks(request: pytest.FixtureRequest) -> None:
    # Requested here, not autouse itself, so that sync tests get no event loop; set up before
    # the test's own fixtures, it is torn down after them, in the test's (function) loop.
    if pytest_asyncio.is_async_test(request.node):
        request.getfixturevalue("_asyncio_tasks_left")


@pytest_asyncio.fixture()
async def _asyncio_tasks_left() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()
    left = [
        task for task in asyncio.all_tasks() - before if task is not current and not task.done()
    ]
    if not left:
        return
    for task in left:
        task.cancel()
    await asyncio.wait(left, timeout=5.0)
    names = ", ".join(sorted(repr(task.get_name()) for task in left))
    pytest.fail(f"tasks left running after the test: {names}")
