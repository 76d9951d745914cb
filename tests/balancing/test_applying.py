"""The target drivers: latest decision wins, a deadline per apply, backoff between failures.

Aspects: a target is Pending until its first apply ends, then reports its own state;
decisions offered while an apply is in flight collapse into the newest; an apply past the
deadline is a Timeout and is retried; failures back off through the delays, repeating the
last, and a success resets them; an unexpected exception becomes TargetError; a set keeps
the drivers of targets still named, removes dropped ones, and never offers an empty decision;
a target that cannot forget the pool does not stop the others from doing so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from balancing.conftest import POOL, HeldTarget, member
from trimtab.api.records import Decision, PodDecision, PodName, PodState
from trimtab.api.validation import parse_spec
from trimtab.balancing.applying import TargetDriver, TargetSet

pytestmark = pytest.mark.looptime

SPEC = parse_spec(
    {"selector": {"matchLabels": {"app": "x"}}, "targets": [{"envoy": {"cluster": "c"}}]}
)
MEMBERS = [member("a")]
LOGGER = logging.getLogger("test.applying")


def decision(weight: int) -> Decision:
    pod = PodDecision(
        name=PodName("a"), weight=weight, max_in_flight=8, state=PodState.SERVING, reason=""
    )
    return Decision(pods=(pod,))


MakeDriver = Callable[[HeldTarget], TargetDriver]


@pytest_asyncio.fixture()
async def driver() -> AsyncIterator[MakeDriver]:
    made: list[TargetDriver] = []

    def make(target: HeldTarget) -> TargetDriver:
        made.append(
            TargetDriver(
                pool=POOL,
                target=target,
                timeout_s=5.0,
                backoffs=(1.0, 2.0, 4.0),
                on_error=errors.append,
                logger=LOGGER,
            )
        )
        return made[-1]

    errors: list[str] = []
    yield make
    for each in made:
        await each.stop(remove=False)


def offer(driver: TargetDriver, weight: int) -> None:
    driver.offer(
        spec=SPEC,
        decision=decision(weight),
        endpoints={m.endpoint.name: m.endpoint for m in MEMBERS},
    )


async def test_pending_until_the_first_apply_then_the_targets_own_state(
    driver: MakeDriver,
) -> None:
    target = HeldTarget()
    target.held = True
    one = driver(target)
    offer(one, 100)
    await asyncio.sleep(0.1)
    assert (one.state().synced, one.state().reason) == (False, "Pending")
    target.release()
    await asyncio.sleep(0.1)
    assert one.state().message == "held target has it"


async def test_offers_during_an_apply_collapse_into_the_latest(driver: MakeDriver) -> None:
    target = HeldTarget()
    target.held = True
    one = driver(target)
    offer(one, 100)
    await asyncio.sleep(0.1)
    for weight in (200, 300, 400):
        offer(one, weight)
    target.release()
    await asyncio.sleep(0.1)
    target.release()
    await asyncio.sleep(0.1)
    assert [d.pods[0].weight for d in target.applied] == [100, 400]


async def test_an_apply_past_the_deadline_times_out_and_is_retried(driver: MakeDriver) -> None:
    target = HeldTarget()
    target.held = True  # never released: every attempt hangs
    one = driver(target)
    offer(one, 100)
    await asyncio.sleep(5.5)
    assert (one.state().reason, one.state().message) == ("Timeout", "no answer in 5.0s")
    await asyncio.sleep(1.0)
    assert [round(t, 3) for t, _ in target.attempts] == [0.0, 6.0]  # 5 s deadline + 1 s backoff


async def test_failures_back_off_repeating_the_last_delay_and_success_resets(
    driver: MakeDriver,
) -> None:
    target = HeldTarget()
    target.failing = True
    one = driver(target)
    offer(one, 100)
    await asyncio.sleep(12.0)
    assert [round(t, 3) for t, _ in target.attempts] == [0.0, 1.0, 3.0, 7.0, 11.0]
    assert (one.state().synced, one.state().reason) == (False, "TargetSyncFailed")
    target.failing = False
    await asyncio.sleep(4.0)  # the retry at 15 succeeds
    target.failing = True
    offer(one, 200)
    await asyncio.sleep(1.5)
    assert [round(t, 3) for t, _ in target.attempts][-3:] == [15.0, 16.0, 17.0]  # 1 s again


async def test_an_unexpected_exception_is_a_target_error(driver: MakeDriver) -> None:
    target = HeldTarget()
    one = driver(target)

    async def broken(**_: object) -> None:
        raise KeyError("weight")

    target.apply = broken  # type: ignore[method-assign,assignment]
    offer(one, 100)
    await asyncio.sleep(0.1)
    assert (one.state().reason, one.state().message) == ("TargetError", "KeyError: 'weight'")


async def test_a_set_keeps_named_targets_and_removes_dropped_ones() -> None:
    kept, dropped, added = HeldTarget("kept"), HeldTarget("dropped"), HeldTarget("added")
    targets = TargetSet(
        pool=POOL, timeout_s=5.0, backoffs=(1.0,), on_error=lambda _: None, logger=LOGGER
    )
    try:
        await targets.replace([kept, dropped])
        targets.offer(spec=SPEC, decision=decision(100), members=MEMBERS)
        await asyncio.sleep(0.1)
        await targets.replace([kept, added])
        assert [name for name, _ in targets.states()] == ["added", "kept"]
        assert (dropped.removed, kept.removed) == ([POOL], [])
        assert dict(targets.states())["added"].reason == "Pending"
        targets.offer(spec=SPEC, decision=Decision(), members=[])
        await asyncio.sleep(0.1)
        assert (len(kept.applied), len(added.applied)) == (1, 0)
    finally:
        await targets.stop(remove=False)


async def test_a_target_that_cannot_forget_does_not_stop_the_others() -> None:
    stuck, fine = HeldTarget("stuck"), HeldTarget("fine")
    stuck.remove_fails = True
    targets = TargetSet(
        pool=POOL, timeout_s=5.0, backoffs=(1.0,), on_error=lambda _: None, logger=LOGGER
    )
    await targets.replace([stuck, fine])
    await targets.stop(remove=True)
    assert fine.removed == [POOL]
    assert targets.states() == []
