"""The planned write order keeps every weighted backend non-empty at every step."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab.targets.gatewayapi.moves import (
    CreateTiers,
    Layout,
    MoveSlices,
    WriteRefs,
    plan_moves,
)

ENDPOINTS = [f"10.0.0.{i}:8000" for i in range(1, 9)]


def problems(refs: Mapping[str, int], tiers: Mapping[str, frozenset[str]]) -> list[str]:
    found = [f"{n} weighted, empty" for n, w in refs.items() if w > 0 and not tiers.get(n)]
    if refs and sum(refs.values()) == 0:
        found.append("all weights 0")
    return found


def run(current: Layout, desired: Layout) -> tuple[dict[str, int], dict[str, frozenset[str]]]:
    refs = dict(current.refs)
    tiers = dict(current.tiers)
    for step in plan_moves(current=current, desired=desired):
        if isinstance(step, CreateTiers | MoveSlices):
            tiers.update(step.tiers)
        elif isinstance(step, WriteRefs):
            refs = dict(step.refs)
        assert problems(refs, tiers) == [], step
    return refs, tiers


layouts = st.dictionaries(
    st.sampled_from([f"t{i}" for i in range(6)]),
    st.tuples(
        st.frozensets(st.sampled_from(ENDPOINTS), min_size=1), st.integers(min_value=1, max_value=9)
    ),
    min_size=1,
)


@settings(max_examples=300, deadline=None)
@given(layouts, layouts)
def test_every_intermediate_state_serves(before: dict, after: dict) -> None:  # type: ignore[type-arg]
    current = Layout(
        refs={n: w for n, (_, w) in before.items()}, tiers={n: p for n, (p, _) in before.items()}
    )
    desired = Layout(
        refs={n: w for n, (_, w) in after.items()}, tiers={n: p for n, (p, _) in after.items()}
    )
    refs, tiers = run(current, desired)
    assert refs == desired.refs
    assert all(tiers[n] == desired.tiers[n] for n in desired.tiers)


def test_a_changing_tier_is_drained_first_then_moved_then_reweighted() -> None:
    current = Layout(refs={"a": 5, "b": 5}, tiers={"a": frozenset({"x"}), "b": frozenset({"y"})})
    desired = Layout(refs={"a": 3, "b": 7}, tiers={"a": frozenset({"x"}), "b": frozenset({"z"})})
    steps = plan_moves(current=current, desired=desired)
    assert steps == [
        WriteRefs({"a": 5, "b": 0}),
        MoveSlices({"b": frozenset({"z"})}),
        WriteRefs({"a": 3, "b": 7}),
    ]


def test_a_plain_reweight_is_one_write() -> None:
    current = Layout(refs={"a": 5}, tiers={"a": frozenset({"x"})})
    desired = Layout(refs={"a": 9}, tiers={"a": frozenset({"x"})})
    assert plan_moves(current=current, desired=desired) == [WriteRefs({"a": 9})]


def test_taking_over_a_rule_keeps_the_users_backend_until_the_tiers_exist() -> None:
    current = Layout(refs={"\0user": 1}, tiers={})
    desired = Layout(refs={"a": 4}, tiers={"a": frozenset({"x"})})
    assert plan_moves(current=current, desired=desired) == [
        CreateTiers({"a": frozenset({"x"})}),
        WriteRefs({"a": 4}),
    ]
