"""No input to the policy, the metrics parsers or spec validation raises a foreign exception.

Hypothesis feeds what a broken exporter, a hostile pool author or a typo can produce: NaN,
infinities, negatives and 1e308 in every sample field; arbitrary previous decisions and
policy settings; arbitrary text (and bytes decoded as a scrape would) as a ``/metrics`` page;
arbitrary JSON-like values (floats inf/nan, deep nesting, huge strings) as a spec or a whole
pool, both random and planted at every real field of a valid spec. The only exception allowed
is the project's own validation error (:class:`~trimtab.errors.SpecInvalid`, a
:class:`~trimtab.errors.TrimtabError`); what comes out must also be usable (finite, in range).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import math
import types
import typing
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from trimtab.admission import settings_from_spec as admission_settings
from trimtab.api.records import Decision, PodDecision, PodInput, PodName, PodSample, PodState
from trimtab.api.spec import CustomMetrics, Engine, InferencePoolSpec
from trimtab.api.validation import parse_pool, parse_spec
from trimtab.balancing.mapping import settings_from_spec
from trimtab.errors import SpecInvalid, TrimtabError
from trimtab.metrics.engines import EngineProfile, evaluate, profile_for
from trimtab.metrics.exposition import parse_exposition
from trimtab.policy import PolicySettings, compute_decision
from trimtab.policy.settings import _RANGES

MANY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- the policy ----------------------------------------------------------------------------

nasty_floats = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, -1.0, 1.0, 85.0, math.nan, math.inf, -math.inf, 1e308, 5e-324]),
)
names = st.sampled_from([PodName(f"pod-{i}") for i in range(6)])
samples = st.one_of(
    st.none(),
    st.builds(
        PodSample,
        running=nasty_floats,
        waiting=nasty_floats,
        kv_usage=nasty_floats,
        preemption_rate=nasty_floats,
        age_s=nasty_floats,
        decode_tokens_per_s=nasty_floats,
        prefix_hit_rate=nasty_floats,
        kv_capacity_tokens=st.one_of(st.none(), st.integers(min_value=-(10**30), max_value=10**30)),
        unreachable=st.booleans(),
        problem=st.one_of(st.none(), st.text(max_size=20)),
    ),
)
pod_inputs = st.builds(
    PodInput, name=names, ready_for_s=st.floats(allow_nan=True, allow_infinity=True), sample=samples
)
previous = st.one_of(
    st.none(),
    st.builds(
        Decision,
        pods=st.lists(
            st.builds(
                PodDecision,
                name=names,
                weight=st.integers(min_value=-(10**12), max_value=10**12),
                max_in_flight=st.integers(min_value=-(10**12), max_value=10**12),
                state=st.sampled_from(list(PodState)),
                reason=st.text(max_size=5),
            ),
            max_size=8,
        ).map(tuple),
    ),
)


def _knob(field: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    """Any value :class:`PolicySettings` accepts for ``field``, edges included."""
    if field.type == "bool":
        return st.booleans()
    low, high, low_in, high_in = _RANGES[field.name]
    if field.type == "int":
        return st.integers(min_value=int(low), max_value=int(high))
    return st.floats(
        min_value=low,
        max_value=high,
        exclude_min=not low_in,
        exclude_max=not high_in,
        allow_nan=False,
    )


@st.composite
def policy_settings(draw: st.DrawFn) -> PolicySettings:
    values = {f.name: draw(_knob(f)) for f in dataclasses.fields(PolicySettings)}
    low, high = sorted((values["kv_low_watermark"], values["kv_high_watermark"]))
    if low == high or high == 0.0 or low >= 1.0:
        low, high = 0.7, 0.9
    values["kv_low_watermark"], values["kv_high_watermark"] = low, high
    floor, ceiling = sorted((values["min_in_flight_per_pod"], values["max_in_flight_per_pod"]))
    values["min_in_flight_per_pod"], values["max_in_flight_per_pod"] = floor, ceiling
    return PolicySettings(**values)


@MANY
@given(
    pods=st.lists(pod_inputs, max_size=8),
    before=previous,
    policy=policy_settings(),
    elapsed_s=st.floats(allow_nan=True, allow_infinity=True),
)
def test_the_policy_decides_on_anything(
    pods: list[PodInput], before: Decision | None, policy: PolicySettings, elapsed_s: float
) -> None:
    decision = compute_decision(pods=pods, previous=before, settings=policy, elapsed_s=elapsed_s)
    assert len(decision.pods) == len({p.name for p in pods})
    for pod in decision.pods:
        assert type(pod.weight) is int and policy.min_weight <= pod.weight <= policy.weight_scale
        assert type(pod.max_in_flight) is int
        assert 1 <= pod.max_in_flight <= policy.max_in_flight_per_pod
        assert pod.reason is not None


@MANY
@given(values=st.dictionaries(st.sampled_from(sorted(_RANGES)), nasty_floats, max_size=5))
def test_bad_settings_are_refused_with_the_field_named(values: dict[str, Any]) -> None:
    try:
        PolicySettings(**values)
    except ValueError as exc:  # the documented contract; the spec layer turns it into SpecInvalid
        assert any(str(exc).startswith(name) for name in _RANGES) or "watermark" in str(exc)


# --- the metrics parsers --------------------------------------------------------------------


def _profiles() -> list[EngineProfile]:
    found = [profile_for(engine=e) for e in Engine if e is not Engine.CUSTOM]
    found.append(profile_for(engine=Engine.TGI, tgi_token_budget=1))
    custom = CustomMetrics.model_validate(
        {"running": "r", "waiting": "w", "kvUsage": "kv", "preemptions": "p_total"}
    )
    found.append(profile_for(engine=Engine.CUSTOM, custom=custom))
    return found


PROFILES = _profiles()
WANTED = sorted(frozenset().union(*(p.sample_names() for p in PROFILES)) | {"r", "w", "kv"})
label_texts = st.text(alphabet=st.sampled_from('a_="{},\\ \n\t\x00é'), max_size=12)
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e309", "-1", "0x10", "", "1_0", "nan", "١"]),
    st.text(max_size=6),
)
sample_lines = st.builds(
    lambda name, labels, value, tail: f"{name}{labels} {value}{tail}",
    st.sampled_from(WANTED),
    st.one_of(st.just(""), label_texts.map(lambda t: "{" + t + "}")),
    values,
    st.sampled_from(["", " 1700000000000", " x", "\r", ' # {a="b"} 1']),
)
pages = st.one_of(
    st.text(),
    st.binary(max_size=400).map(lambda b: b.decode("utf-8", errors="replace")),
    st.binary(max_size=400).map(lambda b: b.decode("latin-1")),
    st.lists(st.one_of(sample_lines, st.text(max_size=30)), max_size=30).map("\n".join),
)


@MANY
@given(page=pages)
def test_any_page_parses_and_every_signal_is_usable_or_unknown(page: str) -> None:
    series = parse_exposition(text=page, names=WANTED)
    for found in series:
        assert found.name in WANTED and isinstance(found.value, float)
    for profile in PROFILES:
        for signal in profile.signals():
            value = evaluate(signal=signal, series=series)
            assert value is None or (math.isfinite(value) and value >= 0), (signal, value)
        if profile.kv_capacity is not None:
            tokens = profile.kv_capacity.tokens(series=series)
            assert tokens is None or (type(tokens) is int and tokens >= 1)


@MANY
@given(numbers=st.lists(st.sampled_from(["1e308", "1.7e308", "9e307"]), min_size=2, max_size=4))
def test_a_sum_that_overflows_is_unknown_not_infinite(numbers: list[str]) -> None:
    page = "\n".join(
        f'vllm:num_requests_running{{model_name="m{i}"}} {n}' for i, n in enumerate(numbers)
    )
    profile = profile_for(engine=Engine.VLLM)
    series = parse_exposition(text=page, names=profile.sample_names())
    value = evaluate(signal=profile.running, series=series)
    assert value is None or math.isfinite(value)


# --- spec validation ------------------------------------------------------------------------

BASE: dict[str, Any] = {
    "selector": {"matchLabels": {"app": "vllm"}},
    "targets": [{"envoy": {"cluster": "llama"}}],
}
HUGE = ["x" * 1_000_000, "9" * 100_000 + "s", "1" * 5000, "é" * 100_000, "1ms" * 300_000]
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            "1e308s",
            ".inf",
            "inf",
            "nan",
            "NaN",
            "-1s",
            "2h",
            "0s",
            "1e-7s",
            "9" * 400,
            "",
            "127.0.0.1:8000",
            "[::1]",
            "http://user:pass@host",
            "\x00",
            "\ud800",
            "a\nb",
            *HUGE,
        ]
    ),
)
json_values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


def _deep(depth: int, *, as_list: bool) -> Any:
    node: Any = 1.0
    for _ in range(depth):
        node = [node] if as_list else {"a": node}
    return node


def _field_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every field of ``model`` as its wire path, nested models and list items included."""
    paths = []
    for name, info in model.model_fields.items():
        path = (*prefix, info.alias or name)
        paths.append(path)
        for inner in _models_in(info.annotation):
            is_list = _is_list(info.annotation)
            paths += _field_paths(inner, (*path, "0") if is_list else path)
    return paths


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _is_list(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin is list:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_is_list(arg) for arg in typing.get_args(annotation))
    return False


FIELD_PATHS = sorted(_field_paths(InferencePoolSpec))


def _plant(spec: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of ``spec`` with ``value`` at ``path`` ("0": the first list item), made on the way."""
    planted = copy.deepcopy(spec)
    node: Any = planted
    for key, following in itertools.pairwise(path):
        want: type = list if following == "0" else dict
        if key == "0":
            if not node or not isinstance(node[0], want):
                node[:1] = [want()]
            node = node[0]
        else:
            if not isinstance(node.get(key), want):
                node[key] = want()
            node = node[key]
    if path[-1] == "0":
        node[:1] = [value]
    else:
        node[path[-1]] = value
    return planted


planted_specs = st.builds(_plant, st.just(BASE), st.sampled_from(FIELD_PATHS), json_values)
specs = st.one_of(
    json_values,
    planted_specs,
    st.lists(st.tuples(st.sampled_from(FIELD_PATHS), json_values), max_size=4).map(
        lambda plants: _plant_all(plants)
    ),
)


def _plant_all(plants: list[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    spec = BASE
    for path, value in plants:
        spec = _plant(spec, path, value)
    return spec


def _only_our_errors(call: Callable[[], Any]) -> Any:
    """``call()``'s result, or ``None`` when it raised SpecInvalid; anything else fails."""
    try:
        return call()
    except SpecInvalid as exc:
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)
        assert len(str(exc)) < 200_000, "the message must not grow with the input"
        return None


def _use(spec: InferencePoolSpec) -> None:
    """What the operator derives from a valid spec must not raise either."""
    _only_our_errors(lambda: settings_from_spec(spec))
    profile_for(
        engine=spec.engine,
        custom=spec.metrics.custom,
        tgi_token_budget=spec.metrics.tgi_max_batch_total_tokens,
    )
    if spec.admission is not None:
        admission_settings(admission=spec.admission, stale_after_s=float(spec.metrics.stale_after))


@MANY
@given(raw=specs)
def test_any_spec_is_valid_or_refused_with_our_error(raw: Any) -> None:
    spec = _only_our_errors(lambda: parse_spec(raw))
    if spec is not None:
        _use(spec)


@MANY
@given(
    raw=st.one_of(
        json_values,
        st.builds(
            lambda meta, spec: {
                "apiVersion": "trimtab.io/v1alpha1",
                "kind": "InferencePool",
                "metadata": meta,
                "spec": spec,
            },
            st.one_of(
                json_values,
                st.fixed_dictionaries({"name": leaves, "namespace": leaves}),
            ),
            specs,
        ),
    )
)
def test_any_pool_is_valid_or_refused_with_our_error(raw: Any) -> None:
    pool = _only_our_errors(lambda: parse_pool(raw))
    if pool is not None:
        _use(pool.spec)


@pytest.mark.parametrize("as_list", [True, False])
@pytest.mark.parametrize("depth", [100, 5000])
def test_deep_nesting_is_refused_with_our_error(depth: int, as_list: bool) -> None:
    for raw in (
        _deep(depth, as_list=as_list),
        _plant(BASE, ("policy",), _deep(depth, as_list=as_list)),
    ):
        assert _only_our_errors(functools.partial(parse_spec, raw)) is None


@pytest.mark.parametrize("huge", HUGE, ids=["x", "digits-s", "digits", "non-ascii", "1ms-repeated"])
@pytest.mark.parametrize("path", FIELD_PATHS, ids=[".".join(p) for p in FIELD_PATHS])
def test_a_huge_string_in_any_field_is_handled(path: tuple[str, ...], huge: str) -> None:
    spec = _only_our_errors(lambda: parse_spec(_plant(BASE, path, huge)))
    if spec is not None:
        _use(spec)


def test_our_validation_error_is_a_trimtab_error() -> None:
    assert issubclass(SpecInvalid, TrimtabError)
