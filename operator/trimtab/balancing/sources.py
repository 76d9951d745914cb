"""Build a pool's metrics source, resolving its Prometheus bearer token.

The token comes from ``bearerTokenSecretRef`` (read through the API, in a cluster only) or
``bearerTokenFile`` (read off the operator's filesystem, in a thread). It is handed to the
source and never logged; errors name the Secret and key, not the value.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from trimtab.api.records import PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import KubeApiError, SpecInvalid
from trimtab.metrics.source import MetricsSource, build_source

__all__ = ["SecretReader", "Sources"]


class SecretReader(Protocol):
    """Reads an API object as JSON; the Kubernetes client in a cluster, nothing locally."""

    async def get(self, path: str) -> Mapping[str, Any]: ...


class Sources:
    """The :class:`~trimtab.balancing.loop.SourceFactory`; ``api`` is ``None`` locally."""

    def __init__(self, *, api: SecretReader | None) -> None:
        self._api = api

    async def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> MetricsSource:
        token = await self._token(pool=pool, spec=spec)
        return build_source(pool=pool, spec=spec, bearer_token=token)

    async def _token(self, *, pool: PoolKey, spec: InferencePoolSpec) -> str | None:
        prometheus = spec.metrics.prometheus
        if prometheus is None:
            return None
        if prometheus.bearer_token_file is not None:
            path = Path(prometheus.bearer_token_file)
            try:
                return (await asyncio.to_thread(path.read_text)).strip()
            except OSError as exc:
                raise SpecInvalid([f"cannot read bearerTokenFile {path}: {exc.strerror}"]) from exc
        ref = prometheus.bearer_token_secret_ref
        if ref is None:
            return None
        where = f"Secret {pool.namespace}/{ref.name} key {ref.key}"
        if self._api is None:
            raise SpecInvalid([f"{where}: Secrets are not available in local mode"])
        try:
            secret = await self._api.get(f"/api/v1/namespaces/{pool.namespace}/secrets/{ref.name}")
        except KubeApiError as exc:
            raise SpecInvalid([f"{where}: cannot read it (HTTP {exc.status})"]) from exc
        encoded = secret.get("data", {}).get(ref.key)
        if not isinstance(encoded, str):
            raise SpecInvalid([f"{where}: no such key"])
        try:
            return base64.b64decode(encoded).decode().strip()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise SpecInvalid([f"{where}: not base64-encoded UTF-8"]) from exc
