"""``trimtab sim`` through click's CliRunner: JSON output, policy subset, errors.

The command is invoked directly (the lead wires it into the ``trimtab`` group).
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from trimtab_lab.sim.command import sim

SCENARIO = """\
name: smoke
seed: 2
duration: 60s
fleet: {replicas: 3, profile: llama3-8b-h100, overrides: [{replica: 0, speed: 0.6}]}
workload:
  trace: {path: conv.csv, format: csv}
  utilization: 0.7
policies: [round_robin, least_request, trimtab, epp, ideal]
"""

KEYS = {
    "ttft_p50",
    "ttft_p90",
    "ttft_p95",
    "ttft_p99",
    "e2e_p50",
    "e2e_p90",
    "e2e_p95",
    "e2e_p99",
    "queue_p99",
    "throughput_tokens_per_s",
    "imbalance",
    "preemptions",
    "rejected",
    "completed",
}


def write_scenario(folder, text=SCENARIO):
    rows = ["arrival_s,prompt_tokens,output_tokens"]
    rows += [f"{i * 0.5},{200 + 37 * (i % 11)},{5 if i % 3 else 300}" for i in range(200)]
    (folder / "conv.csv").write_text("\n".join(rows) + "\n")
    path = folder / "scenario.yaml"
    path.write_text(text)
    return path


def test_writes_json_for_the_chosen_policies(tmp_path):
    path = write_scenario(tmp_path)
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        sim, [str(path), "--json", str(out), "--policies", "round_robin,trimtab"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data["policies"]) == {"round_robin", "trimtab"}
    for numbers in data["policies"].values():
        assert set(numbers) >= KEYS
        assert numbers["completed"] > 0
    assert data["scenario"]["name"] == "smoke"
    assert "trimtab" in result.output


def test_same_seed_gives_identical_json(tmp_path):
    path = write_scenario(tmp_path)
    outputs = []
    for name in ("a.json", "b.json"):
        out = tmp_path / name
        result = CliRunner().invoke(sim, [str(path), "--json", str(out), "--seed", "7"])
        assert result.exit_code == 0, result.output
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1]


def test_plot_is_written(tmp_path):
    path = write_scenario(tmp_path)
    out = tmp_path / "plot.png"
    result = CliRunner().invoke(
        sim, [str(path), "--plot", str(out), "--policies", "round_robin,trimtab,ideal"]
    )
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_malformed_scenario_and_unknown_policy_fail_clearly(tmp_path):
    path = write_scenario(tmp_path, SCENARIO.replace("replicas: 3", "replicas: -3"))
    result = CliRunner().invoke(sim, [str(path)])
    assert result.exit_code == 1
    assert "fleet.replicas" in result.output
    good = write_scenario(tmp_path)
    result = CliRunner().invoke(sim, [str(good), "--policies", "magic"])
    assert result.exit_code == 2
    assert "magic" in result.output


def test_malformed_trace_names_file_and_line(tmp_path):
    path = write_scenario(tmp_path)
    (tmp_path / "conv.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,x,1\n")
    result = CliRunner().invoke(sim, [str(path)])
    assert result.exit_code == 1
    assert "conv.csv, line 3, field 'prompt_tokens'" in result.output
