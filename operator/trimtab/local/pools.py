"""Read the pools file of local mode: InferencePool objects, one YAML document each.

Only static ``spec.endpoints`` pools are accepted (there are no pods to select without
Kubernetes). Every problem is reported at once, prefixed with the document number and pool
name; the good pools of a file are served while the bad ones are reported, the way one bad
InferencePool never stops the operator serving the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trimtab.api.records import PoolKey
from trimtab.api.validation import parse_pool
from trimtab.errors import SpecInvalid

__all__ = ["MAX_FILE_BYTES", "MAX_POOLS", "LocalPool", "PoolsFile", "load_pools"]

MAX_FILE_BYTES = 1024 * 1024
"""A pools file is hand-written configuration; a megabyte holds hundreds of pools."""
MAX_POOLS = 500


@dataclass(frozen=True, kw_only=True)
class LocalPool:
    key: PoolKey
    raw_spec: dict[str, Any]
    """The spec as written (camelCase), validated; the loop parses it again like in-cluster."""


@dataclass(frozen=True, kw_only=True)
class PoolsFile:
    pools: list[LocalPool]
    problems: list[str] = field(default_factory=list)
    """One line per bad document, each naming the file and document number."""


def load_pools(path: Path) -> PoolsFile:
    """Parse ``path``; raise :class:`SpecInvalid` only when it holds no usable pool."""
    documents = _documents(path)
    problems: list[str] = []
    pools: list[LocalPool] = []
    if len(documents) > MAX_POOLS:
        raise SpecInvalid([f"{path}: {len(documents)} documents; at most {MAX_POOLS} pools"])
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
    if not pools:
        raise SpecInvalid(problems)
    return PoolsFile(pools=pools, problems=problems)


def _documents(path: Path) -> list[Any]:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SpecInvalid([f"{path}: {size} bytes; a pools file is at most 1 MiB"])
        text = path.read_bytes().decode("utf-8")
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except UnicodeDecodeError as exc:
        raise SpecInvalid([f"{path}: not UTF-8 text (byte {exc.start})"]) from exc
    except OSError as exc:
        raise SpecInvalid([f"{path}: {exc.strerror or type(exc).__name__}"]) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecInvalid([f"{path}{where}: {problem}"]) from exc
