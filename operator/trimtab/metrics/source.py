"""The one interface the controller reads metrics through, and the factory that picks it.

:class:`MetricsSource` hides whether a pool's numbers come from Prometheus or from each pod's
``/metrics``. Its contract: one :class:`~trimtab.api.records.PodSample` per endpoint asked for,
``None`` fields for whatever a pod could not tell, and :class:`~trimtab.errors.SourceUnavailable`
only when the source as a whole failed this cycle (so the controller can keep its last good
snapshot and back off).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from trimtab.api.records import Endpoint, PodName, PodSample, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.api.spec import MetricsSource as SourceKind
from trimtab.metrics import direct, prometheus
from trimtab.metrics.engines import profile_for

__all__ = ["MetricsSource", "build_source"]


class MetricsSource(Protocol):
    """Reads the load of a pool's members; one instance per pool, reused every cycle."""

    async def read(self, *, endpoints: Sequence[Endpoint]) -> dict[PodName, PodSample]:
        """One sample per endpoint (keyed by its name), with ``age_s`` filled where known.

        Raises :class:`~trimtab.errors.SourceUnavailable` only when the whole source failed.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; the source is not used afterwards."""
        ...


def build_source(
    *,
    pool: PoolKey,
    spec: InferencePoolSpec,
    bearer_token: str | None = None,
    max_body_bytes: int = direct.DEFAULT_MAX_BODY_BYTES,
) -> MetricsSource:
    """The source a pool's spec asks for.

    ``bearer_token`` is sent to Prometheus only (never to pods); the caller resolves it from
    ``tokenSource`` or ``bearerTokenSecretRef`` after checking the URL is allowed
    (:mod:`trimtab.balancing.sources`). ``max_body_bytes`` bounds every response read.
    """
    metrics = spec.metrics
    profile = profile_for(
        engine=spec.engine,
        custom=metrics.custom,
        tgi_token_budget=metrics.tgi_max_batch_total_tokens,
    )
    if metrics.source is SourceKind.PROMETHEUS:
        if metrics.prometheus is None:
            raise ValueError(f"pool {pool}: source prometheus needs metrics.prometheus")
        settings = metrics.prometheus
        return prometheus.PrometheusSource(
            pool=pool,
            profile=profile,
            url=str(settings.url),
            bearer_token=bearer_token,
            insecure_skip_verify=settings.insecure_skip_verify,
            timeout_s=float(settings.timeout),
            namespace_label=settings.namespace_label,
            pod_label=settings.pod_label,
            rate_window_s=prometheus.rate_window_for(
                interval_s=float(metrics.interval),
                scrape_interval_s=float(settings.scrape_interval),
            ),
            max_body_bytes=max_body_bytes,
        )
    return direct.DirectSource(
        pool=pool,
        profile=profile,
        path=metrics.path,
        port=metrics.port,
        timeout_s=direct.timeout_for(interval_s=float(metrics.interval)),
        max_body_bytes=max_body_bytes,
    )
