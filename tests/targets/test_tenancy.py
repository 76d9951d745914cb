"""What one tenant's pool may not do to the operator or to another tenant (issue 12, point 3).

Covered: static endpoints need ``--allow-static-endpoints`` (the source factory refuses them);
Prometheus URL rules match origin and path segment-wise, never by string prefix; token
sources are per namespace; ``envoyFile.path`` is confined to one directory, without ``..`` and
without symlink escapes, and refused when no directory is configured; xDS cluster names are
``<namespace>/<cluster>`` in a cluster, so two tenants naming the same cluster never collide,
and ``envoy-bootstrap --namespaced-clusters`` names them the same way. The loop turning these
refusals into ``Ready=False``/``SpecInvalid`` is covered in tests/e2e/test_tenancy.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.validation import parse_spec
from trimtab.balancing.sources import PrometheusUrlRule, Sources, SourceSettings, TokenSource
from trimtab.commands.main import main
from trimtab.errors import NotAllowed
from trimtab.targets.envoy_file import EdsFileTarget
from trimtab.targets.envoy_xds import EnvoyXdsTarget
from trimtab.targets.factory import BuiltinTargets, TargetSettings
from trimtab.targets.xds.cache import SnapshotCache

SERVING = PoolKey(namespace="serving", name="llama")
OTHER = PoolKey(namespace="other", name="llama")


def _spec(**overrides: Any) -> Any:
    raw: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "x"}},
        "targets": [{"envoy": {"cluster": "llama"}}],
    }
    raw.update(overrides)
    return parse_spec(raw)


class _NoApi:
    async def get(self, path: str) -> dict[str, Any]:
        raise AssertionError(f"no API call expected, got {path}")


async def test_static_endpoints_need_the_installers_flag() -> None:
    spec = _spec(selector=None, endpoints=[{"name": "vm", "address": "10.0.0.9", "port": 80}])
    with pytest.raises(NotAllowed, match="--allow-static-endpoints"):
        await Sources(api=_NoApi()).build(pool=SERVING, spec=spec)
    allowed = Sources(api=_NoApi(), settings=SourceSettings(static_endpoints=True))
    source = await allowed.build(pool=SERVING, spec=spec)
    await source.aclose()


async def test_secret_tokens_need_the_installers_flag() -> None:
    spec = _spec(
        metrics={
            "source": "prometheus",
            "prometheus": {
                "url": "http://prom.monitoring:9090",
                "bearerTokenSecretRef": {"name": "s", "key": "k"},
            },
        }
    )
    settings = SourceSettings(prometheus_urls=(PrometheusUrlRule.parse("http://prom.monitoring"),))
    with pytest.raises(NotAllowed, match="--allow-secret-tokens"):
        await Sources(api=_NoApi(), settings=settings).build(pool=SERVING, spec=spec)


@pytest.mark.parametrize(
    ("rule", "namespace", "url", "allowed"),
    [
        ("http://prom:9090", "serving", "http://prom:9090/", True),
        ("http://prom:9090", "serving", "http://prom:9091/", False),
        ("http://prom", "serving", "http://prom:9091/", True),  # no port: any port
        ("http://prom:9090", "serving", "https://prom:9090/", False),
        ("http://prom:9090", "serving", "http://prom.evil.com:9090/", False),
        ("http://127.0.0.1", "serving", "http://127.0.0.1.nip.io/", False),
        ("http://prom/prom", "serving", "http://prom/prom/api", True),
        ("http://prom/prom", "serving", "http://prom/prometheus", False),
        ("http://prom/prom", "serving", "http://prom/prom/../admin", False),
        ("http://prom/prom", "serving", "http://prom/prom/%2e%2e/admin", False),
        ("serving=http://prom", "serving", "http://prom/", True),
        ("serving=http://prom", "other", "http://prom/", False),
        ("http://prom", "serving", "http://u:p@prom/", False),
    ],
)
def test_url_rules_match_origin_and_path_segments(
    rule: str, namespace: str, url: str, allowed: bool
) -> None:
    assert PrometheusUrlRule.parse(rule).allows(namespace=namespace, url=url) is allowed


@pytest.mark.parametrize(
    "text", ["prom:9090", "ftp://prom", "http://u:p@prom", "http://prom/?q=1", "Bad_NS=http://p"]
)
def test_bad_url_rules_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        PrometheusUrlRule.parse(text)


async def test_a_token_source_of_another_namespace_is_not_there(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc123")
    settings = SourceSettings(
        prometheus_urls=(PrometheusUrlRule.parse("http://prom"),),
        token_sources=(TokenSource.parse(f"other/mon={token}"),),
    )
    spec = _spec(
        metrics={
            "source": "prometheus",
            "prometheus": {"url": "http://prom:9090", "tokenSource": "mon"},
        }
    )
    with pytest.raises(NotAllowed, match="no such token source for namespace serving"):
        await Sources(api=_NoApi(), settings=settings).build(pool=SERVING, spec=spec)
    source = await Sources(api=_NoApi(), settings=settings).build(pool=OTHER, spec=spec)
    await source.aclose()


def _file_spec(path: str) -> Any:
    return _spec(targets=[{"envoyFile": {"cluster": "llama", "path": path}}])


def test_file_targets_are_refused_without_a_directory(tmp_path: Path) -> None:
    targets = BuiltinTargets(cache=SnapshotCache(), config_maps=None)
    with pytest.raises(NotAllowed, match="--envoy-file-dir"):
        targets.build(pool=SERVING, spec=_file_spec(str(tmp_path / "llama.json")))


def test_file_targets_stay_inside_their_directory(tmp_path: Path) -> None:
    root = tmp_path / "eds"
    root.mkdir()
    (root / "escape").symlink_to(tmp_path)
    targets = BuiltinTargets(
        cache=SnapshotCache(), config_maps=None, settings=TargetSettings(envoy_file_dir=root)
    )
    built = targets.build(pool=SERVING, spec=_file_spec(f"{root}/team/llama.json"))
    assert isinstance(built[0], EdsFileTarget)
    for outside in (
        f"{tmp_path}/llama.json",
        f"{root}/../llama.json",
        f"{root}/escape/llama.json",
        str(root),
        "/etc/passwd",
    ):
        with pytest.raises(NotAllowed):
            targets.build(pool=SERVING, spec=_file_spec(outside))


async def test_an_oversized_file_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "llama.json"
    target = EdsFileTarget(cluster="llama", path=path, max_bytes=100)
    spec = _spec()
    with pytest.raises(Exception, match="over 100"):
        await target.apply(
            pool=SERVING,
            spec=spec,
            decision=_decision(),
            endpoints={PodName("a"): Endpoint(name=PodName("a"), address="10.0.0.1", port=8000)},
        )
    assert not path.exists()


def _decision() -> Decision:
    return Decision(
        pods=(
            PodDecision(
                name=PodName("a"), weight=1000, max_in_flight=64, state=PodState.SERVING, reason=""
            ),
        )
    )


async def test_two_tenants_naming_the_same_cluster_do_not_collide() -> None:
    cache = SnapshotCache()
    namespaced = BuiltinTargets(
        cache=cache, config_maps=None, settings=TargetSettings(namespaced_clusters=True)
    )
    endpoints = {PodName("a"): Endpoint(name=PodName("a"), address="10.0.0.1", port=8000)}
    names = []
    for pool in (SERVING, OTHER):
        (target,) = namespaced.build(pool=pool, spec=_spec())
        assert isinstance(target, EnvoyXdsTarget)
        names.append(target.name)
        await target.apply(pool=pool, spec=_spec(), decision=_decision(), endpoints=endpoints)
    assert names == ["envoy:serving/llama", "envoy:other/llama"]
    # Without namespacing (local mode: one operator, one owner) the second claim conflicts.
    plain = BuiltinTargets(cache=SnapshotCache(), config_maps=None)
    first, second = (plain.build(pool=p, spec=_spec())[0] for p in (SERVING, OTHER))
    await first.apply(pool=SERVING, spec=_spec(), decision=_decision(), endpoints=endpoints)
    with pytest.raises(Exception, match="llama"):
        await second.apply(pool=OTHER, spec=_spec(), decision=_decision(), endpoints=endpoints)


def test_envoy_bootstrap_names_clusters_as_the_operator_serves_them(tmp_path: Path) -> None:
    pool = {
        "apiVersion": "trimtab.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "llama", "namespace": "serving"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "targets": [
                {"envoy": {"cluster": "llama"}},
                {"envoyFile": {"cluster": "llama-file", "configMap": "eds"}},
            ],
        },
    }
    pools = tmp_path / "pools.yaml"
    pools.write_text(yaml.safe_dump(pool))
    for flags, xds_name in ((["--namespaced-clusters"], "serving/llama"), ([], "llama")):
        result = CliRunner().invoke(main, ["envoy-bootstrap", "--pools", str(pools), *flags])
        assert result.exit_code == 0, result.output
        routes = yaml.safe_load(result.output)["static_resources"]["listeners"][0]
        clusters = {r["route"]["cluster"] for r in _routes(routes)}
        # File clusters keep their name: it is the installer's static bootstrap cluster.
        assert clusters == {xds_name, "llama-file"}


def _routes(listener: dict[str, Any]) -> list[dict[str, Any]]:
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return [r for host in manager["route_config"]["virtual_hosts"] for r in host["routes"]]
