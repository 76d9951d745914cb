"""File and ConfigMap EDS targets, and the status-only target.

Covered: the file holds a DiscoveryResponse with the ClusterLoadAssignment and is replaced by
rename (a new inode), unchanged decisions are not rewritten, the ConfigMap flavour hands the
same content to the injected writer. Envoy reading the file is in tests/envoy.
"""

from __future__ import annotations

import json

from trimtab.targets.envoy_file import EdsConfigMapTarget, EdsFileTarget


async def _apply(target, make, weights):
    return await target.apply(
        pool=make.pool,
        spec=make.spec(),
        decision=make.decision(weights),
        endpoints=make.endpoints(list(weights)),
    )


async def test_file_is_replaced_by_rename(tmp_path, make):
    path = tmp_path / "eds" / "llama.json"
    target = EdsFileTarget(cluster="llama", path=path)
    assert (await _apply(target, make, {"a": 1, "b": 3})).synced
    first_inode = path.stat().st_ino
    await _apply(target, make, {"a": 2, "b": 3})
    assert path.stat().st_ino != first_inode
    document = json.loads(path.read_text())
    weights = [
        e["loadBalancingWeight"] for e in document["resources"][0]["endpoints"][0]["lbEndpoints"]
    ]
    assert weights == [2, 3]
    assert [p.name for p in path.parent.iterdir()] == ["llama.json"]


async def test_unchanged_decision_is_not_rewritten(tmp_path, make):
    path = tmp_path / "llama.json"
    target = EdsFileTarget(cluster="llama", path=path)
    await _apply(target, make, {"a": 1})
    inode = path.stat().st_ino
    await _apply(target, make, {"a": 1})
    assert path.stat().st_ino == inode


async def test_configmap_writer_gets_the_content(make):
    written = []

    async def write(*, namespace, name, key, content):
        written.append((namespace, name, key, json.loads(content)["versionInfo"]))

    target = EdsConfigMapTarget(cluster="llama", config_map="llama-eds", write=write)
    state = await _apply(target, make, {"a": 1})
    assert state.synced
    assert written[0][:3] == ("serving", "llama-eds", "llama.json")
