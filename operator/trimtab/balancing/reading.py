"""A pool's metrics source: built from the spec, read with a deadline, closed when replaced.

:class:`MetricsReader` owns at most one :class:`~trimtab.metrics.source.MetricsSource` per
pool. A source that cannot be built (a missing Secret, an unreadable token file) is not an
error of the loop: every read then reports a ``SourceUnavailable`` problem, so the weights
keep decaying towards equal instead of freezing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from trimtab.api.reasons import MetricsReason
from trimtab.api.records import Endpoint, PodName, PodSample, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.balancing.observations import MetricsProblem
from trimtab.errors import NotAllowed, SourceUnavailable
from trimtab.metrics.source import MetricsSource
from trimtab.redaction import sanitize

__all__ = ["MetricsReader", "Reading", "SourceFactory"]

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]


class SourceFactory(Protocol):
    """Builds a pool's metrics source (resolving secrets where the runtime has them)."""

    async def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> MetricsSource: ...


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One read: the samples that arrived, and why there are none when they did not."""

    fresh: Mapping[PodName, PodSample] = field(default_factory=dict)
    problem: MetricsProblem | None = None


class MetricsReader:
    """Owns one pool's metrics source across spec changes."""

    def __init__(
        self, *, pool: PoolKey, sources: SourceFactory, floor_s: float, logger: Logger
    ) -> None:
        self._pool = pool
        self._sources = sources
        self._floor_s = floor_s
        self._logger = logger
        self._source: MetricsSource | None = None
        self._build_problem: MetricsProblem | None = None

    async def rebuild(self, *, spec: InferencePoolSpec) -> None:
        """Close the current source and build the one ``spec`` names."""
        await self.aclose()
        try:
            self._source = await self._sources.build(pool=self._pool, spec=spec)
            self._build_problem = None
        except NotAllowed:
            raise
        except Exception as exc:  # a missing Secret must not stop the weights from decaying
            message = sanitize(f"cannot build metrics source: {exc}")
            self._build_problem = MetricsProblem(
                kind=MetricsReason.SOURCE_UNAVAILABLE, message=message
            )
            self._logger.warning("%s", message)

    async def read(self, *, endpoints: Sequence[Endpoint], interval_s: float) -> Reading:
        """Read ``endpoints``, waiting at most the interval (or the floor, if longer)."""
        if self._source is None or not endpoints:
            return Reading(problem=self._build_problem)
        deadline = max(self._floor_s, interval_s)
        try:
            async with asyncio.timeout(deadline):
                return Reading(fresh=await self._source.read(endpoints=endpoints))
        except SourceUnavailable as exc:
            message = sanitize(exc) or "metrics source unavailable"
        except TimeoutError:
            message = f"metrics read took longer than {deadline}s"
        return Reading(
            problem=MetricsProblem(kind=MetricsReason.SOURCE_UNAVAILABLE, message=message)
        )

    async def aclose(self) -> None:
        if self._source is not None:
            source, self._source = self._source, None
            await source.aclose()
