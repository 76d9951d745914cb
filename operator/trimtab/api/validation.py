"""Turning pydantic validation errors into messages a person can act on.

Each line names the field by its path as written in YAML (``spec.metrics.staleAfter``) and
says what is allowed, so the same text works in a Warning event, a CLI error and a test.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from trimtab.api.resource import InferencePool
from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import SpecInvalid

__all__ = ["format_errors", "parse_pool", "parse_spec"]


def _path(loc: tuple[int | str, ...], prefix: str) -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts[-1 if parts else 0 :] = [f"{parts[-1] if parts else ''}[{item}]"]
        elif item.startswith("function-") or item in {"str", "int", "float"}:
            continue
        else:
            parts.append(item)
    return ".".join(parts) or "(root)"


def format_errors(error: ValidationError, *, prefix: str = "") -> list[str]:
    """One ``"field.path: what is wrong"`` line per problem."""
    lines = []
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{_path(item['loc'], prefix)}: {message}")
    return lines


def parse_spec(raw: Any) -> InferencePoolSpec:
    """Validate a pool's ``spec``; raise :class:`SpecInvalid` listing every problem."""
    try:
        return InferencePoolSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecInvalid(format_errors(exc, prefix="spec")) from exc


def parse_pool(raw: Any) -> InferencePool:
    """Validate a whole InferencePool object; raise :class:`SpecInvalid` on any problem."""
    try:
        return InferencePool.model_validate(raw)
    except ValidationError as exc:
        raise SpecInvalid(format_errors(exc)) from exc
