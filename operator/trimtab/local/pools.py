"""Read the pools file of local mode: InferencePool objects, one YAML document each.

Only static ``spec.endpoints`` pools are accepted (there are no pods to select without
Kubernetes). Every problem in the file is reported at once, prefixed with the document number
and pool name, so one run of ``trimtab run --local`` shows all that needs fixing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trimtab.api.records import PoolKey
from trimtab.api.validation import parse_pool
from trimtab.errors import SpecInvalid

__all__ = ["LocalPool", "load_pools"]


@dataclass(frozen=True, kw_only=True)
class LocalPool:
    key: PoolKey
    raw_spec: dict[str, Any]
    """The spec as written (camelCase), validated; the loop parses it again like in-cluster."""


def load_pools(path: Path) -> list[LocalPool]:
    """Parse ``path``; raise :class:`SpecInvalid` listing every problem in it."""
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as exc:
        raise SpecInvalid([f"{path}: {exc}"]) from exc
    problems: list[str] = []
    pools: list[LocalPool] = []
    for number, document in enumerate(documents, start=1):
        where = f"{path} document {number}"
        try:
            pool = parse_pool(document)
        except SpecInvalid as exc:
            problems += [f"{where}: {problem}" for problem in exc.problems]
            continue
        key = PoolKey(namespace=pool.metadata.namespace, name=pool.metadata.name)
        if pool.spec.selector is not None:
            problems.append(
                f"{where} ({key}): spec.selector needs Kubernetes; use spec.endpoints locally"
            )
        elif key in {p.key for p in pools}:
            problems.append(f"{where}: pool {key} is defined twice")
        else:
            pools.append(LocalPool(key=key, raw_spec=pool.spec.to_wire()))
    if not documents:
        problems.append(f"{path}: no InferencePool in the file")
    if problems:
        raise SpecInvalid(problems)
    return pools
