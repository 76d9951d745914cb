"""The dashboard and the alerts use only metrics that exist, and the alerts fire when they should.

Aspects: every PromQL expression of the Grafana dashboard (panels and template variables) names
only metrics that trimtab or the engines export (the list below: the metrics module's names and
DESIGN.md's engine table); the dashboard shows trimtab's per-pod gauges one line per pod; the
ConfigMap carries the dashboard file unchanged. The PrometheusRule's groups pass the real
`promtool check rules`, and `promtool test rules` proves on synthetic series that a pinned pod
alerts while a uniformly busy pool does not, plus the stale, sync and no-pods alerts.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .rendering import CHART, REPO, Manifest, only

TRIMTAB_GAUGES = {
    "trimtab_pod_weight",
    "trimtab_pod_max_in_flight",
    "trimtab_pod_running",
    "trimtab_pod_waiting",
    "trimtab_pod_kv_usage",
    "trimtab_pool_ready_pods",
    "trimtab_pool_metrics_available",
    "trimtab_pool_metrics_age_seconds",
    "trimtab_pool_weight_spread",
}
TRIMTAB_COUNTERS = {"trimtab_target_sync_errors_total", "trimtab_events_total"}
TRIMTAB_HISTOGRAMS = {"trimtab_decision_duration_seconds"}
TRIMTAB_METRICS = (
    TRIMTAB_GAUGES
    | TRIMTAB_COUNTERS
    | {f"{h}{suffix}" for h in TRIMTAB_HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
)
#: prometheus-client's process collector.
PROCESS_METRICS = {
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
}
#: DESIGN.md, "Engine metrics".
ENGINE_METRICS = {
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:cache_config_info",
    "sglang:num_queue_reqs",
    "sglang:num_running_reqs",
    "sglang:token_usage",
    "tgi_queue_size",
    "tgi_batch_current_size",
    "tgi_batch_current_max_tokens",
    "trtllm_num_requests_waiting",
    "trtllm_num_requests_running",
    "trtllm_kv_cache_utilization",
    "nv_trt_llm_request_metrics",
    "nv_trt_llm_kv_cache_block_metrics",
}


def _picker_metrics() -> set[str]:
    """The picker's series, as its telemetry module declares them (counters get ``_total``)."""
    source = (REPO / "operator" / "trimtab" / "picker" / "telemetry.py").read_text()
    found = set()
    for kind, name in re.findall(
        r"(Counter|Histogram|Gauge\w*)\(\s*\"(trimtab_picker_\w+)\"", source
    ):
        if kind == "Counter":
            found.add(name if name.endswith("_total") else f"{name}_total")
        elif kind == "Histogram":
            found |= {f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count")}
        else:
            found.add(name)
    return found


PICKER_METRICS = _picker_metrics()
KNOWN_METRICS = TRIMTAB_METRICS | PROCESS_METRICS | ENGINE_METRICS | PICKER_METRICS


def test_the_picker_metrics_are_found_in_its_telemetry() -> None:
    assert {
        "trimtab_picker_pod_in_flight",
        "trimtab_picker_pod_cap",
        "trimtab_picker_queue_length",
        "trimtab_picker_refusals_total",
        "trimtab_picker_queue_wait_seconds_bucket",
    } <= PICKER_METRICS


_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
_MODIFIERS = r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"


def metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression (functions, labels and keywords removed)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # range selectors
    expr = re.sub(_MODIFIERS, " ", expr)
    expr = re.sub(r"\$\w+|\$\{\w+\}", " ", expr)  # Grafana variables
    names = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if expr[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if match.group(0).lower() not in _KEYWORDS:
            names.add(match.group(0))
    return names


def test_metric_names_parser() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (namespace, le) (rate(a_bucket{pool=~"$pool"}'
        "[$__rate_interval]))) - quantile by (pool) (0.5, b) and on (pod) c > bool 1e3"
    )
    assert metric_names(expr) == {"a_bucket", "b", "c"}


def dashboard() -> dict[str, Any]:
    loaded = json.loads((CHART / "dashboards" / "trimtab.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


def panel_targets() -> list[tuple[str, dict[str, Any]]]:
    return [
        (panel["title"], target)
        for panel in dashboard()["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def test_dashboard_uses_only_exported_metrics() -> None:
    used: set[str] = set()
    for title, target in panel_targets():
        names = metric_names(target["expr"])
        assert names, f"panel {title!r} queries no metric"
        used |= names
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["definition"])
            assert inner, variable["definition"]
            used |= metric_names(inner.group(1))
    assert used - KNOWN_METRICS == set()


def test_dashboard_shows_every_per_pod_gauge_one_line_per_pod() -> None:
    per_pod = {m for m in TRIMTAB_GAUGES if m.startswith("trimtab_pod_")}
    shown = set()
    for _, target in panel_targets():
        names = metric_names(target["expr"]) & per_pod
        if names and "by" not in target["expr"]:
            assert target["legendFormat"] == "{{pod}}"
            shown |= names
    assert shown == per_pod


def test_dashboard_shows_pool_imbalance() -> None:
    exprs = [target["expr"] for _, target in panel_targets()]
    assert any("trimtab_pool_weight_spread" in e for e in exprs)
    assert any("quantile by (namespace, pool) (0.5, trimtab_pod_kv_usage" in e for e in exprs)


def test_dashboard_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        area = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & area, f"panel {panel['title']!r} overlaps another"
        cells |= area


def test_dashboard_configmap_carries_the_file(rendered_default: list[Manifest]) -> None:
    configmap = only(rendered_default, "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["trimtab.json"]) == dashboard()


def rule_groups(manifests: list[Manifest]) -> list[dict[str, Any]]:
    groups = only(manifests, "PrometheusRule")["spec"]["groups"]
    assert isinstance(groups, list)
    return groups


def test_rules_use_only_trimtab_metrics(rendered_all: list[Manifest]) -> None:
    used = {
        name
        for group in rule_groups(rendered_all)
        for rule in group["rules"]
        for name in metric_names(rule["expr"])
    }
    assert used
    assert used - TRIMTAB_METRICS == set()


def test_rules_pass_promtool_check(
    promtool: Path, rendered_all: list[Manifest], scratch: Path
) -> None:
    rules = scratch / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups(rendered_all)}))
    result = subprocess.run(
        [str(promtool), "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


def _series(metric: str, pod: str | None, values: str) -> dict[str, str]:
    labels = 'namespace="serving",pool="llama"' + (f',pod="{pod}"' if pod else "")
    return {"series": f"{metric}{{{labels}}}", "values": values}


def _alert(name: str, severity: str, **labels: str) -> dict[str, Any]:
    return {
        "exp_labels": {
            "alertname": name,
            "severity": severity,
            "namespace": "serving",
            "pool": "llama",
            **labels,
        }
    }


RULE_TESTS: dict[str, dict[str, Any]] = {
    "one pod pinned on KV cache": {
        "input_series": [
            _series("trimtab_pod_kv_usage", "a", "0.97x20"),
            _series("trimtab_pod_kv_usage", "b", "0.30x20"),
            _series("trimtab_pod_kv_usage", "c", "0.35x20"),
        ],
        "alert_rule_test": [
            {"alertname": "TrimtabPodKVPinned", "eval_time": "3m", "exp_alerts": []},
            {
                "alertname": "TrimtabPodKVPinned",
                "eval_time": "10m",
                "exp_alerts": [_alert("TrimtabPodKVPinned", "warning", pod="a")],
            },
        ],
    },
    "a uniformly busy pool is not pinned": {
        "input_series": [_series("trimtab_pod_kv_usage", pod, "0.95x20") for pod in ("a", "b", "c")]
        + [_series("trimtab_pod_waiting", pod, "30x20") for pod in ("a", "b", "c")],
        "alert_rule_test": [
            {"alertname": "TrimtabPodKVPinned", "eval_time": "10m", "exp_alerts": []},
            {"alertname": "TrimtabPodQueuePinned", "eval_time": "10m", "exp_alerts": []},
        ],
    },
    "one pod with a queue while the others have none": {
        "input_series": [
            _series("trimtab_pod_waiting", "a", "40x20"),
            _series("trimtab_pod_waiting", "b", "2x20"),
            _series("trimtab_pod_waiting", "c", "3x20"),
        ],
        "alert_rule_test": [
            {
                "alertname": "TrimtabPodQueuePinned",
                "eval_time": "10m",
                "exp_alerts": [_alert("TrimtabPodQueuePinned", "warning", pod="a")],
            }
        ],
    },
    "stale metrics, failing target, no ready pods": {
        "input_series": [
            _series("trimtab_pool_metrics_available", None, "0x20"),
            _series("trimtab_pool_ready_pods", None, "0x20"),
            {
                "series": 'trimtab_target_sync_errors_total{namespace="serving",pool="llama",'
                'target="envoy"}',
                "values": "0+3x20",
            },
        ],
        "alert_rule_test": [
            {
                "alertname": "TrimtabMetricsStale",
                "eval_time": "10m",
                "exp_alerts": [_alert("TrimtabMetricsStale", "warning")],
            },
            {
                "alertname": "TrimtabPoolNoReadyPods",
                "eval_time": "10m",
                "exp_alerts": [_alert("TrimtabPoolNoReadyPods", "critical")],
            },
            {
                "alertname": "TrimtabTargetSyncFailing",
                "eval_time": "15m",
                "exp_alerts": [_alert("TrimtabTargetSyncFailing", "warning", target="envoy")],
            },
        ],
    },
    "a healthy pool is quiet": {
        "input_series": [
            _series("trimtab_pool_metrics_available", None, "1x20"),
            _series("trimtab_pool_metrics_age_seconds", None, "3x20"),
            _series("trimtab_pool_ready_pods", None, "3x20"),
        ],
        "alert_rule_test": [
            {"alertname": name, "eval_time": "10m", "exp_alerts": []}
            for name in ("TrimtabMetricsStale", "TrimtabPoolNoReadyPods")
        ],
    },
}


@pytest.mark.parametrize("case", RULE_TESTS)
def test_alerts_fire_when_they_should(
    case: str, promtool: Path, rendered_all: list[Manifest], scratch: Path
) -> None:
    groups = copy.deepcopy(rule_groups(rendered_all))
    for group in groups:
        for rule in group["rules"]:
            # Annotation templates are checked by `promtool check rules`; leaving them out
            # keeps the expectations to the labels that route an alert.
            rule.pop("annotations", None)
    (scratch / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    test = {"interval": "1m", **RULE_TESTS[case]}
    (scratch / "test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [test]})
    )
    result = subprocess.run(
        [str(promtool), "test", "rules", "test.yaml"],
        cwd=scratch,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
