"""A pool's raw spec, parsed into what the loop runs on only when it changes.

:class:`SpecTracker` holds the latest raw spec and generation handed in by the runtime (kopf
or the pools file) and parses it into a :class:`PoolConfig`: the validated spec and the
policy settings it maps to. An invalid spec keeps the last valid config for pacing the loop,
but the loop does nothing with it until the spec is fixed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trimtab import policy
from trimtab.api.records import PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.api.validation import parse_spec
from trimtab.balancing.mapping import settings_from_spec
from trimtab.errors import SpecInvalid

__all__ = ["PoolConfig", "SpecTracker"]

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]


@dataclass(frozen=True, kw_only=True)
class PoolConfig:
    """A valid spec and the policy settings it maps to."""

    spec: InferencePoolSpec
    policy: policy.PolicySettings


class SpecTracker:
    """One pool's spec as last handed in, and as last parsed."""

    def __init__(
        self,
        *,
        pool: PoolKey,
        raw_spec: Mapping[str, Any],
        generation: int | None,
        logger: Logger,
    ) -> None:
        self._pool = pool
        self._raw = raw_spec
        self._parsed: Mapping[str, Any] | None = None
        self._logger = logger
        self.generation = generation
        self.problems: tuple[str, ...] = ()
        """Why the latest raw spec is invalid; empty when it is valid (or not parsed yet)."""
        self.last_valid: PoolConfig | None = None

    def update(self, *, raw_spec: Mapping[str, Any], generation: int | None) -> bool:
        """Take a new raw spec or generation; ``True`` if either differs from the last one."""
        if raw_spec == self._raw and generation == self.generation:
            return False
        self._raw, self.generation = raw_spec, generation
        return True

    def reparse(self) -> PoolConfig | None:
        """Parse the raw spec if it changed since the last parse; the new config if valid."""
        if self._raw == self._parsed:
            return None
        self._parsed = self._raw
        try:
            spec = parse_spec(self._raw)
            config = PoolConfig(spec=spec, policy=settings_from_spec(spec))
        except SpecInvalid as exc:
            self.problems = tuple(exc.problems)
            self._logger.warning("Spec of %s is invalid: %s", self._pool, exc)
            return None
        self.problems = ()
        self.last_valid = config
        return config

    def refuse(self, problems: list[str]) -> None:
        """The installation does not allow the latest spec: unusable until it changes."""
        self.problems = tuple(problems)
        self._logger.warning("Spec of %s is not allowed: %s", self._pool, "; ".join(problems))

    @property
    def usable(self) -> PoolConfig | None:
        """The config to run on: ``None`` while the latest spec is invalid or unparsed."""
        return None if self.problems else self.last_valid
