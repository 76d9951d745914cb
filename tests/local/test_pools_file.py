"""Hostile and broken pools files: a clear message naming file, document and field, never a
traceback; the good pools of a file are served while the bad ones are reported."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from trimtab.errors import SpecInvalid
from trimtab.local.pools import MAX_FILE_BYTES, load_pools

GOOD: dict[str, Any] = {
    "apiVersion": "trimtab.io/v1alpha1",
    "kind": "InferencePool",
    "metadata": {"name": "good", "namespace": "default"},
    "spec": {
        "endpoints": [{"name": "a", "address": "127.0.0.1", "port": 8000}],
        "targets": [{"envoy": {"cluster": "good"}}],
    },
}


def _pool(name: str, **spec: Any) -> dict[str, Any]:
    pool = copy.deepcopy(GOOD)
    pool["metadata"]["name"] = name
    pool["spec"].update(spec)
    pool["spec"]["targets"] = [{"envoy": {"cluster": name.replace("_", "-")}}]
    return pool


def _write(tmp_path: Path, *documents: dict[str, Any]) -> Path:
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return path


def test_good_pools_are_served_and_bad_ones_reported(tmp_path: Path) -> None:
    bad = _pool("bad", metrics={"interval": float("inf")})
    loaded = load_pools(_write(tmp_path, GOOD, bad))
    assert [str(p.key) for p in loaded.pools] == ["default/good"]
    assert len(loaded.problems) == 1
    assert "document 2" in loaded.problems[0]
    assert "spec.metrics.interval" in loaded.problems[0]


@pytest.mark.parametrize(
    ("document", "phrase"),
    [
        (_pool("Bad_Name"), "metadata.name"),
        (
            _pool(
                "twice",
                endpoints=[
                    {"name": "a", "address": "10.0.0.1", "port": 8000},
                    {"name": "b", "address": "10.0.0.1", "port": 8000},
                ],
            ),
            "must not repeat",
        ),
        (_pool("port", endpoints=[{"name": "a", "address": "127.0.0.1:8000", "port": 1}]), "port"),
        (_pool("v6", endpoints=[{"name": "a", "address": "[::1]", "port": 1}]), "brackets"),
        (_pool("stale", metrics={"staleAfter": "2h"}), "spec.metrics.staleAfter"),
        (_pool("huge", metrics={"interval": 1e308}), "week"),
    ],
)
def test_each_bad_pool_is_named_with_its_field(
    tmp_path: Path, document: dict[str, Any], phrase: str
) -> None:
    with pytest.raises(SpecInvalid) as caught:
        load_pools(_write(tmp_path, document))
    assert any(phrase in problem for problem in caught.value.problems), caught.value.problems


def test_non_utf8_bytes_are_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_bytes(b"apiVersion: trimtab.io/v1alpha1\nkind: \xff\xfe\n")
    with pytest.raises(SpecInvalid, match="not UTF-8"):
        load_pools(path)


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("apiVersion: trimtab.io/v1alpha1\nkind: [unclosed\n")
    with pytest.raises(SpecInvalid, match="line"):
        load_pools(path)


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    with pytest.raises(SpecInvalid, match="at most 1 MiB"):
        load_pools(path)
