"""``trimtab envoy-bootstrap``: the printed YAML is accepted by Envoy 1.40 and routes as documented.

Covered: --cluster and --pools inputs, header routes with the first cluster as default, retry
policy (retryOn, numRetries, no timeout), admin on 127.0.0.1, ``envoy --mode validate``.
"""

from __future__ import annotations

import subprocess

import yaml
from click.testing import CliRunner

from trimtab.commands.envoy_bootstrap import envoy_bootstrap
from trimtab_lab.envoy import envoy_binary

POOLS = """
apiVersion: trimtab.io/v1alpha1
kind: InferencePool
metadata: {name: llama, namespace: serving}
spec:
  endpoints: [{name: a, address: 10.0.0.1, port: 8000}]
  retry: {numRetries: 2, retryOn: [connect-failure, reset-before-request]}
  targets: [{envoy: {cluster: llama}}]
"""


def _routes(config):
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    return hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]


def test_pools_file_sets_routes_and_retries(tmp_path):
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)
    result = CliRunner().invoke(envoy_bootstrap, ["--pools", str(pools), "--cluster", "extra"])
    assert result.exit_code == 0, result.output
    config = yaml.safe_load(result.output)
    routes = _routes(config)
    assert [r["route"]["cluster"] for r in routes] == ["extra", "llama", "extra"]
    llama = routes[1]["route"]
    assert llama["timeout"] == "0s"
    assert llama["retry_policy"]["retry_on"] == "connect-failure,reset-before-request"
    assert llama["retry_policy"]["num_retries"] == 2
    assert config["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"


def test_envoy_accepts_the_bootstrap(tmp_path):
    result = CliRunner().invoke(envoy_bootstrap, ["--cluster", "a", "--cluster", "b"])
    path = tmp_path / "envoy.yaml"
    path.write_text(result.output)
    check = subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(path), "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr[-2000:]


def test_no_cluster_is_a_usage_error():
    assert CliRunner().invoke(envoy_bootstrap, []).exit_code == 2
