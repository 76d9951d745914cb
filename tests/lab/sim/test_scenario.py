"""Scenario parsing: durations, defaults, and table-driven malformed files.

Each malformed case must raise a ScenarioError whose message names the offending field path.
"""

from __future__ import annotations

import pytest

from trimtab_lab.sim.errors import ScenarioError
from trimtab_lab.sim.running import policy_settings
from trimtab_lab.sim.scenario import PolicyName, load_scenario, parse_scenario

BASE = {
    "name": "t",
    "duration": "60s",
    "fleet": {"replicas": 2},
    "workload": {"mix": "classic", "utilization": 0.5},
}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1800s", 1800.0), ("30m", 1800.0), ("500ms", 0.5), ("1h30m", 5400.0), (2.5, 2.5), (60, 60.0)],
)
def test_durations(text, seconds):
    assert parse_scenario({**BASE, "duration": text}).duration == seconds


@pytest.mark.parametrize("text", ["", "30", "5 minutes", "1x", "m5", True, "0s", -1])
def test_bad_durations(text):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario({**BASE, "duration": text})
    assert all(problem.startswith("duration") for problem in caught.value.problems)


def test_defaults():
    scenario = parse_scenario(BASE)
    assert scenario.duration == 60.0
    assert scenario.fleet.profile == "llama3-8b-h100"
    assert PolicyName.TRIMTAB in scenario.policies
    assert scenario.trimtab.delay == 0.25


def _with(path: str, value: object) -> dict[str, object]:
    data: dict[str, object] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    keys = path.split(".")
    target = data
    for key in keys[:-1]:
        target = target[key]  # type: ignore[assignment]
    target[keys[-1]] = value  # type: ignore[index]
    return data


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("duration", "soon", "duration"),
        ("fleet.replicas", 0, "fleet.replicas"),
        ("fleet.profile", "gpt-9-tpu", "fleet"),
        ("fleet.overrides", [{"replica": 5, "speed": 0.5}], "fleet"),
        ("fleet.overrides", [{"replica": 0, "speed": -1}], "fleet.overrides.0.speed"),
        ("fleet.extra", 1, "fleet.extra"),
        ("workload.utilization", -0.1, "workload.utilization"),
        ("workload.trace", {"path": "x.csv", "format": "parquet"}, "workload.trace.format"),
        ("policies", ["round_robin", "magic"], "policies.1"),
        ("trimtab", {"delay": "later"}, "trimtab.delay"),
        ("colour", "blue", "colour"),
    ],
)
def test_malformed_scenarios_name_the_field(path, value, field):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(_with(path, value))
    assert any(problem.startswith(field) for problem in caught.value.problems), caught.value


def test_policy_settings_overrides_are_checked():
    scenario = parse_scenario(_with("trimtab", {"settings": {"max_in_flight_per_pod": 0}}))
    with pytest.raises(ScenarioError, match="max_in_flight_per_pod"):
        policy_settings(scenario)
    scenario = parse_scenario(_with("trimtab", {"settings": {"no_such_knob": 1}}))
    with pytest.raises(ScenarioError, match="no_such_knob"):
        policy_settings(scenario)


def test_yaml_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: t\nfleet: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: line \d+"):
        load_scenario(path)
