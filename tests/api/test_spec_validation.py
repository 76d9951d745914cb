"""InferencePool spec validation: every invalid value names its field and says what is allowed.

Aspects: the table of invalid specs (each must fail, and the message must name the field and
contain the hint), the valid examples shipped in deploy/examples, defaults, and the wire
round trip. Not tested here: the CRD's own CEL rules (see test_crd.py for the schema).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from trimtab.api.spec import Engine, MetricsSource
from trimtab.api.validation import parse_pool, parse_spec
from trimtab.errors import SpecInvalid

BASE: dict[str, Any] = {
    "selector": {"matchLabels": {"app": "vllm"}},
    "targets": [{"envoy": {"cluster": "llama"}}],
}


def _with(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    # (case, spec, field path in the message, a phrase of the explanation)
    ("no selector nor endpoints", _with(selector=None), "spec", "exactly one of selector"),
    (
        "both selector and endpoints",
        _with(endpoints=[{"name": "a", "address": "10.0.0.1", "port": 8000}]),
        "spec",
        "exactly one of selector",
    ),
    ("empty selector", _with(selector={}), "spec.selector", "matchLabels or matchExpressions"),
    (
        "In without values",
        _with(selector={"matchExpressions": [{"key": "app", "operator": "In"}]}),
        "spec.selector.matchExpressions[0]",
        "needs at least one value",
    ),
    (
        "unknown selector operator",
        _with(selector={"matchExpressions": [{"key": "app", "operator": "Like"}]}),
        "spec.selector.matchExpressions[0].operator",
        "'In', 'NotIn', 'Exists' or 'DoesNotExist'",
    ),
    (
        "port zero",
        _with(targetPorts=[{"number": 0}]),
        "spec.targetPorts[0].number",
        "greater than or equal to 1",
    ),
    (
        "port too big",
        _with(targetPorts=[{"number": 70000}]),
        "spec.targetPorts[0].number",
        "less than or equal to 65535",
    ),
    (
        "duplicate ports",
        _with(targetPorts=[{"number": 8000}, {"number": 8000}]),
        "spec",
        "targetPorts must be unique",
    ),
    ("bad duration", _with(metrics={"interval": "2 seconds"}), "spec.metrics.interval", "ms, s, m"),
    ("negative duration", _with(metrics={"interval": -1}), "spec.metrics.interval", "negative"),
    ("interval too short", _with(metrics={"interval": "10ms"}), "spec.metrics.interval", "100ms"),
    (
        "staleAfter below interval",
        _with(metrics={"interval": "10s", "staleAfter": "5s"}),
        "spec.metrics",
        "staleAfter (5s) must be at least interval (10s)",
    ),
    (
        "prometheus without url",
        _with(metrics={"source": "prometheus"}),
        "spec.metrics",
        "needs metrics.prometheus",
    ),
    (
        "prometheus url not http",
        _with(metrics={"source": "prometheus", "prometheus": {"url": "ftp://x"}}),
        "spec.metrics.prometheus.url",
        "URL scheme should be 'http' or 'https'",
    ),
    (
        "two token sources",
        _with(
            metrics={
                "source": "prometheus",
                "prometheus": {
                    "url": "http://prom:9090",
                    "tokenSource": "t",
                    "bearerTokenSecretRef": {"name": "s", "key": "k"},
                },
            }
        ),
        "spec.metrics.prometheus",
        "not both",
    ),
    (
        "token file named by the pool",
        _with(
            metrics={
                "source": "prometheus",
                "prometheus": {"url": "http://prom:9090", "bearerTokenFile": "/etc/passwd"},
            }
        ),
        "spec.metrics.prometheus.bearerTokenFile",
        "Extra inputs are not permitted",
    ),
    (
        "token source not a name",
        _with(
            metrics={
                "source": "prometheus",
                "prometheus": {"url": "http://prom:9090", "tokenSource": "/var/run/token"},
            }
        ),
        "spec.metrics.prometheus.tokenSource",
        "should match pattern",
    ),
    (
        "user and password in the url",
        _with(
            metrics={
                "source": "prometheus",
                "prometheus": {"url": "http://admin:hunter2@prom:9090"},
            }
        ),
        "spec.metrics.prometheus.url",
        "must not hold a user or password",
    ),
    (
        "budget over 100",
        _with(retry={"budgetPercent": 150}),
        "spec.retry.budgetPercent",
        "less than or equal to 100",
    ),
    ("unknown retryOn", _with(retry={"retryOn": ["5xx"]}), "spec.retry.retryOn[0]", "'reset'"),
    (
        "custom without queries",
        _with(engine="custom"),
        "spec",
        "engine custom needs metrics.custom",
    ),
    ("unknown engine", _with(engine="llamacpp"), "spec.engine", "'vllm'"),
    ("no targets", _with(targets=[]), "spec.targets", "at least 1 item"),
    ("targets missing", _with(targets=None), "spec.targets", "Field required"),
    ("empty target", _with(targets=[{}]), "spec.targets[0]", "exactly one of envoy"),
    (
        "two kinds in one target",
        _with(targets=[{"envoy": {"cluster": "a"}, "gatewayAPI": {"httpRoute": {"name": "r"}}}]),
        "spec.targets[0]",
        "exactly one of envoy",
    ),
    (
        "gatewayAPI rule by name and index",
        _with(
            targets=[{"gatewayAPI": {"httpRoute": {"name": "r"}, "ruleName": "a", "ruleIndex": 1}}]
        ),
        "spec.targets[0].gatewayAPI",
        "ruleName or ruleIndex, not both",
    ),
    (
        "gatewayAPI too many tiers",
        _with(targets=[{"gatewayAPI": {"httpRoute": {"name": "r"}, "tiers": 17}}]),
        "spec.targets[0].gatewayAPI.tiers",
        "less than or equal to 16",
    ),
    (
        "envoyFile without destination",
        _with(targets=[{"envoyFile": {"cluster": "a"}}]),
        "spec.targets[0].envoyFile",
        "exactly one of configMap or path",
    ),
    (
        "duplicate clusters",
        _with(targets=[{"envoy": {"cluster": "a"}}, {"envoyFile": {"cluster": "a", "path": "/x"}}]),
        "spec",
        "cluster names must be unique",
    ),
    (
        "max in flight zero",
        _with(policy={"maxInFlightPerPod": 0}),
        "spec.policy.maxInFlightPerPod",
        "greater than or equal to 1",
    ),
    (
        "kv watermark over 1",
        _with(policy={"kvHighWatermark": 1.5}),
        "spec.policy.kvHighWatermark",
        "less than or equal to 1",
    ),
    ("slow start too long", _with(policy={"slowStart": "2h"}), "spec.policy.slowStart", "1h"),
    (
        "endpoint address with a port",
        _with(selector=None, endpoints=[{"name": "a", "address": "127.0.0.1:8000", "port": 8000}]),
        "spec.endpoints[0].address",
        "put the port in port",
    ),
    (
        "endpoint address in brackets",
        _with(selector=None, endpoints=[{"name": "a", "address": "[::1]", "port": 8000}]),
        "spec.endpoints[0].address",
        "without brackets",
    ),
    (
        "endpoints repeat an address and port",
        _with(
            selector=None,
            endpoints=[
                {"name": "a", "address": "10.0.0.1", "port": 8000},
                {"name": "b", "address": "10.0.0.1", "port": 8000},
            ],
        ),
        "spec",
        "must not repeat",
    ),
    (
        "interval infinite",
        _with(metrics={"interval": float("inf")}),
        "spec.metrics.interval",
        "week",
    ),
    ("interval huge", _with(metrics={"interval": 1e308}), "spec.metrics.interval", "week"),
    (
        "interval not a number",
        _with(metrics={"interval": float("nan")}),
        "spec.metrics.interval",
        "week",
    ),
    ("stale after two hours", _with(metrics={"staleAfter": "2h"}), "spec.metrics.staleAfter", "1h"),
    ("admission mode unknown", _with(admission={"mode": "queue"}), "spec.admission.mode", "picker"),
    (
        "admission queue negative",
        _with(admission={"queueLength": -1}),
        "spec.admission.queueLength",
        "0",
    ),
    (
        "admission ttl too long",
        _with(admission={"mode": "picker", "queueTtl": "11m"}),
        "spec.admission.queueTtl",
        "10m",
    ),
    ("admission kv limit zero", _with(admission={"kvLimit": 0}), "spec.admission.kvLimit", "0"),
    (
        "admission retry after beyond ttl",
        _with(admission={"mode": "picker", "queueTtl": "2s", "retryAfter": "5s"}),
        "spec.admission",
        "retryAfter must not exceed queueTtl",
    ),
    ("smoothing too long", _with(policy={"smoothing": "11m"}), "spec.policy.smoothing", "10m"),
    (
        "watermarks crossed",
        _with(policy={"kvLowWatermark": 0.95, "kvHighWatermark": 0.9}),
        "spec.policy",
        "kvLowWatermark (0.95) must be below",
    ),
    (
        "affinity mode unknown",
        _with(policy={"affinity": {"mode": "sticky"}}),
        "spec.policy.affinity.mode",
        "'ringHash' or 'maglev'",
    ),
    (
        "affinity balance factor below the average",
        _with(policy={"affinity": {"mode": "ringHash", "hashBalanceFactor": 99}}),
        "spec.policy.affinity.hashBalanceFactor",
        "100",
    ),
    (
        "affinity header not lowercase",
        _with(policy={"affinity": {"mode": "ringHash", "sessionHeader": "X-Session-Id"}}),
        "spec.policy.affinity.sessionHeader",
        "should match pattern",
    ),
    (
        "affinity header a pseudo-header",
        _with(policy={"affinity": {"mode": "maglev", "sessionHeader": ":authority"}}),
        "spec.policy.affinity.sessionHeader",
        "should match pattern",
    ),
    (
        "affinity ring beyond Envoy's limit",
        _with(policy={"affinity": {"maximumRingSize": 8_388_609}}),
        "spec.policy.affinity.maximumRingSize",
        "8388608",
    ),
    (
        "affinity ring sizes crossed",
        _with(policy={"affinity": {"minimumRingSize": 4096, "maximumRingSize": 1024}}),
        "spec.policy.affinity",
        "minimumRingSize (4096) must not exceed maximumRingSize (1024)",
    ),
    ("bad app protocol", _with(appProtocol="grpc"), "spec.appProtocol", "'http' or 'h2c'"),
    ("unknown field", _with(replicas=3), "spec.replicas", "Extra inputs are not permitted"),
    (
        "duplicate endpoint names",
        _with(
            selector=None,
            endpoints=[
                {"name": "a", "address": "10.0.0.1", "port": 8000},
                {"name": "a", "address": "10.0.0.2", "port": 8000},
            ],
        ),
        "spec",
        "endpoints names must be unique",
    ),
    (
        "endpoint with bad address",
        _with(selector=None, endpoints=[{"name": "a", "address": "http://x/", "port": 8000}]),
        "spec.endpoints[0].address",
        "IP address or a hostname",
    ),
    (
        "endpoint name not a DNS label",
        _with(selector=None, endpoints=[{"name": "GPU_A", "address": "10.0.0.1", "port": 8000}]),
        "spec.endpoints[0].name",
        "should match pattern",
    ),
]


@pytest.mark.parametrize(
    ("spec", "field", "hint"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_spec_names_the_field(spec: dict[str, Any], field: str, hint: str) -> None:
    with pytest.raises(SpecInvalid) as info:
        parse_spec(spec)
    matching = [p for p in info.value.problems if p.startswith(f"{field}: ")]
    assert matching, f"no problem names {field!r}: {info.value.problems}"
    assert any(hint in p for p in matching), info.value.problems


def test_the_table_is_big_enough() -> None:
    assert len(INVALID) >= 15


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "deploy" / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_shipped_examples_are_valid(path: Path) -> None:
    for document in yaml.safe_load_all(path.read_text()):
        pool = parse_pool(document)
        assert pool.spec.targets


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 3


def test_defaults_are_practical() -> None:
    spec = parse_spec(BASE)
    assert spec.engine is Engine.VLLM
    assert spec.metrics.source is MetricsSource.DIRECT
    assert spec.metrics.interval == 2.0
    assert spec.metrics.stale_after == 15.0
    assert [p.number for p in spec.target_ports] == [8000]
    assert [r.value for r in spec.retry.retry_on] == ["connect-failure", "reset"]


def test_wire_round_trip_keeps_what_the_user_wrote() -> None:
    raw = _with(metrics={"interval": "1m30s", "staleAfter": "2m"})
    wire = parse_spec(raw).to_wire()
    assert wire["metrics"]["interval"] == "1m30s"
    assert wire["metrics"]["staleAfter"] == "2m"
    assert parse_spec(wire) == parse_spec(raw)


def test_whole_object_checks_kind_and_version() -> None:
    with pytest.raises(SpecInvalid) as info:
        parse_pool({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": BASE})
    fields = {p.split(":")[0] for p in info.value.problems}
    assert {"apiVersion", "kind"} <= fields
