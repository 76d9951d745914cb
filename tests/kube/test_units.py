"""Pure parts of the controller: condition transitions, event rate limits, selectors.

No API and no kopf here; the clocks are plain numbers so every expectation is exact.
"""

from __future__ import annotations

import datetime

from trimtab.api.records import PoolKey
from trimtab.api.spec import LabelSelector
from trimtab.api.status import ConditionStatus, ConditionType
from trimtab.balancing.conditions import set_condition
from trimtab.balancing.membership import pod_record, selector_matches
from trimtab.balancing.spamfilter import SpamFilter

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=5)
POOL = PoolKey(namespace="ns", name="p")


def test_transition_time_moves_only_when_status_flips() -> None:
    ready = ConditionType.READY
    first, changed = set_condition(
        conditions=[], kind=ready, status=ConditionStatus.TRUE, reason="A", now=T0
    )
    assert changed
    same, changed = set_condition(
        conditions=first, kind=ready, status=ConditionStatus.TRUE, reason="B", now=T1
    )
    assert changed and same[0].reason == "B"
    assert same[0].last_transition_time == "2026-01-01T00:00:00Z"
    flipped, _ = set_condition(
        conditions=same, kind=ready, status=ConditionStatus.FALSE, reason="B", now=T1
    )
    assert flipped[0].last_transition_time == "2026-01-01T00:05:00Z"


def test_unchanged_condition_reports_no_change() -> None:
    kind, status = ConditionType.DEGRADED, ConditionStatus.FALSE
    first, _ = set_condition(conditions=[], kind=kind, status=status, reason="Ok", now=T0)
    _, changed = set_condition(conditions=first, kind=kind, status=status, reason="Ok", now=T1)
    assert not changed


def test_spam_filter_passes_a_burst_then_one_per_refill() -> None:
    now = [0.0]
    spam = SpamFilter(burst=3, refill_s=300.0, clock=lambda: now[0])
    assert [spam.allow(pool=POOL, reason="R") for _ in range(4)] == [True, True, True, False]
    assert spam.allow(pool=POOL, reason="Other")
    now[0] = 299.0
    assert not spam.allow(pool=POOL, reason="R")
    now[0] = 600.0
    assert spam.allow(pool=POOL, reason="R")


def test_selector_expressions() -> None:
    selector = LabelSelector.model_validate(
        {
            "matchLabels": {"app": "v"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}],
        }
    )
    assert selector_matches(selector=selector, labels={"app": "v"})
    assert not selector_matches(selector=selector, labels={"app": "v", "tier": "x"})


def test_terminating_or_unready_pods_are_not_members() -> None:
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    pod = {"metadata": {"name": "a"}, "status": {"podIP": "10.0.0.1", "conditions": [ready]}}
    assert pod_record(pod) is not None
    assert pod_record({**pod, "metadata": {"name": "a", "deletionTimestamp": "x"}}) is None
    assert pod_record({**pod, "status": {"conditions": [ready]}}) is None
