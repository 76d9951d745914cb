"""Build a pool's metrics source within what the operator's installer allows.

A pool never names a file or an arbitrary host. Its Prometheus URL must match the operator's
allow-list (``--prometheus-url [NAMESPACE=]URL``); its bearer token comes from a token source
the installer defines (``--prometheus-token [NAMESPACE/]NAME=FILE``, chosen by
``tokenSource: NAME``) or from a Secret of the pool's own namespace (``bearerTokenSecretRef``,
only with ``--allow-secret-tokens``, which the chart sets with the RBAC that grants it). Static
``endpoints`` need ``--allow-static-endpoints`` in a cluster. Every check runs here, before the
source exists, so a URL that is not allowed is never contacted. Errors name the rule, the
token source or the Secret, never a token's bytes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Self

from trimtab.api.records import PoolKey
from trimtab.api.spec import InferencePoolSpec, PrometheusSpec, SecretKeyRef
from trimtab.api.spec import MetricsSource as SourceKind
from trimtab.errors import KubeApiError, NotAllowed, SpecInvalid
from trimtab.metrics.direct import DEFAULT_MAX_BODY_BYTES
from trimtab.metrics.source import MetricsSource, build_source
from trimtab.redaction import sanitize

__all__ = ["PrometheusUrlRule", "SecretReader", "SourceSettings", "Sources", "TokenSource"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Service-account and OIDC tokens are a few KiB; anything much larger is not a token.
_MAX_TOKEN_BYTES = 16 * 1024
# RFC 6750 b64token, widened to every visible ASCII character: what a header can carry.
_TOKEN = re.compile(r"^[\x21-\x7e]+$")


class SecretReader(Protocol):
    """Reads an API object as JSON; the Kubernetes client in a cluster, nothing locally."""

    async def get(self, path: str) -> Mapping[str, Any]: ...


@dataclass(frozen=True, kw_only=True)
class PrometheusUrlRule:
    """One ``--prometheus-url`` entry: an origin and a path prefix, for one namespace or all.

    A rule without a port matches any port of its host; its path matches itself and anything
    below it, segment-wise (``/prom`` matches ``/prom/api``, not ``/prometheus``).
    """

    scheme: str
    host: str
    port: int | None
    path: str
    namespace: str | None = None

    @classmethod
    def parse(cls, text: str) -> Self:
        """``[NAMESPACE=]URL``; raises :class:`ValueError` saying what is wrong."""
        head, sep, rest = text.partition("=")
        namespace, url = (head, rest) if sep and "://" not in head else (None, text)
        if namespace is not None and not _DNS_LABEL.match(namespace):
            raise ValueError(f"{namespace!r} is not a namespace name")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
            raise ValueError("give an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("the URL must not hold a user or password")
        if parts.query or parts.fragment:
            raise ValueError("the URL must not hold a query or fragment")
        return cls(
            scheme=parts.scheme,
            host=parts.hostname,
            port=parts.port,
            path=parts.path.rstrip("/"),
            namespace=namespace,
        )

    def allows(self, *, namespace: str, url: str) -> bool:
        if self.namespace is not None and self.namespace != namespace:
            return False
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
        except ValueError:
            return False
        if parts.username is not None or parts.password is not None:
            return False
        if parts.scheme != self.scheme or parts.hostname != self.host:
            return False
        if self.port is not None and port != self.port:
            return False
        segments = parts.path.split("/")
        # A dot segment or an encoded slash or dot could climb out of the prefix upstream.
        if any(s in {".", ".."} or "%2" in s.lower() for s in segments):
            return False
        path = parts.path.rstrip("/")
        return path == self.path or path.startswith(self.path + "/")

    def __str__(self) -> str:
        port = "" if self.port is None else f":{self.port}"
        where = "every namespace" if self.namespace is None else f"namespace {self.namespace}"
        return f"{self.scheme}://{self.host}{port}{self.path or '/'} ({where})"


@dataclass(frozen=True, kw_only=True)
class TokenSource:
    """One ``--prometheus-token`` entry: a name pools may choose, the file the token is in."""

    name: str
    path: Path
    namespace: str | None = None
    """Only pools of this namespace may use it; ``None``: every namespace."""

    @classmethod
    def parse(cls, text: str) -> Self:
        """``[NAMESPACE/]NAME=FILE``; raises :class:`ValueError` saying what is wrong."""
        head, sep, path = text.partition("=")
        if not sep or not path:
            raise ValueError("give NAME=FILE or NAMESPACE/NAME=FILE")
        namespace, slash, name = head.rpartition("/")
        for part in (name, *([namespace] if slash else [])):
            if not _DNS_LABEL.match(part):
                raise ValueError(f"{part!r} is not a DNS label")
        return cls(name=name, path=Path(path), namespace=namespace if slash else None)


@dataclass(frozen=True, kw_only=True)
class SourceSettings:
    """What the installer allows pools to read from, and the bounds of each read."""

    prometheus_urls: tuple[PrometheusUrlRule, ...] = ()
    any_prometheus_url: bool = False
    """Pools may query Prometheus URLs off the list, never with a token (local mode without
    ``--prometheus-url``: the pools file is the operator's own)."""
    token_sources: tuple[TokenSource, ...] = ()
    secret_tokens: bool = False
    """``bearerTokenSecretRef`` may be read (the installer granted Secret reads)."""
    static_endpoints: bool = False
    max_metrics_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest metrics response read, per pod (direct) or per query (Prometheus)."""

    def __post_init__(self) -> None:
        names = [(t.namespace, t.name) for t in self.token_sources]
        if len(set(names)) != len(names):
            raise ValueError("a token source is defined twice for the same namespace")


class Sources:
    """The :class:`~trimtab.balancing.reading.SourceFactory`; ``api`` is ``None`` locally."""

    def __init__(self, *, api: SecretReader | None, settings: SourceSettings | None = None) -> None:
        self._api = api
        self._settings = settings or SourceSettings()

    async def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> MetricsSource:
        """The pool's source; :class:`NotAllowed` when it asks for what is not allowed."""
        if spec.endpoints is not None and not self._settings.static_endpoints:
            raise NotAllowed(
                [
                    "spec.endpoints: static endpoints are not allowed by this installation "
                    "(the operator runs without --allow-static-endpoints); use selector"
                ]
            )
        token = None
        prometheus = spec.metrics.prometheus
        if spec.metrics.source is SourceKind.PROMETHEUS and prometheus is not None:
            token = await self._checked_token(pool=pool, prometheus=prometheus)
        return build_source(
            pool=pool,
            spec=spec,
            bearer_token=token,
            max_body_bytes=self._settings.max_metrics_bytes,
        )

    async def _checked_token(self, *, pool: PoolKey, prometheus: PrometheusSpec) -> str | None:
        url = str(prometheus.url)
        listed = any(
            rule.allows(namespace=pool.namespace, url=url)
            for rule in self._settings.prometheus_urls
        )
        wants_token = (
            prometheus.token_source is not None or prometheus.bearer_token_secret_ref is not None
        )
        if not listed and not (self._settings.any_prometheus_url and not wants_token):
            why = (
                "a token is sent only to a URL on the operator's --prometheus-url list"
                if self._settings.any_prometheus_url
                else "it is not on the operator's --prometheus-url list for this namespace"
            )
            raise NotAllowed([f"spec.metrics.prometheus.url: {sanitize(url, limit=120)}: {why}"])
        if prometheus.token_source is not None:
            return await self._file_token(pool=pool, name=prometheus.token_source)
        if prometheus.bearer_token_secret_ref is not None:
            return await self._secret_token(pool=pool, ref=prometheus.bearer_token_secret_ref)
        return None

    async def _file_token(self, *, pool: PoolKey, name: str) -> str:
        where = f"spec.metrics.prometheus.tokenSource {name}"
        found = [
            t
            for t in self._settings.token_sources
            if t.name == name and t.namespace in (None, pool.namespace)
        ]
        if not found:
            raise NotAllowed([f"{where}: no such token source for namespace {pool.namespace}"])
        # A namespace's own definition wins over a cluster-wide one of the same name.
        source = max(found, key=lambda t: t.namespace is not None)
        try:
            raw = await asyncio.to_thread(_read_bounded, source.path)
        except OSError as exc:
            # The path is the installer's, but it is still not the pool author's to know.
            raise SpecInvalid(
                [f"{where}: the operator cannot read it ({exc.strerror or type(exc).__name__})"]
            ) from exc
        return _token(raw=raw, where=where)

    async def _secret_token(self, *, pool: PoolKey, ref: SecretKeyRef) -> str:
        where = f"Secret {pool.namespace}/{ref.name} key {ref.key}"
        if self._api is None:
            raise NotAllowed([f"{where}: Secrets are not available in local mode"])
        if not self._settings.secret_tokens:
            raise NotAllowed(
                [
                    f"{where}: this installation does not read Secrets (the operator runs "
                    "without --allow-secret-tokens; chart value rbac.readSecrets)"
                ]
            )
        try:
            secret = await self._api.get(f"/api/v1/namespaces/{pool.namespace}/secrets/{ref.name}")
        except KubeApiError as exc:
            raise SpecInvalid([f"{where}: cannot read it (HTTP {exc.status})"]) from exc
        encoded = secret.get("data", {}).get(ref.key)
        if not isinstance(encoded, str):
            raise SpecInvalid([f"{where}: no such key"])
        try:
            raw = base64.b64decode(encoded, validate=True)
        except binascii.Error as exc:
            raise SpecInvalid([f"{where}: not base64-encoded"]) from exc
        return _token(raw=raw, where=where)


def _read_bounded(path: Path) -> bytes:
    with path.open("rb") as file:
        return file.read(_MAX_TOKEN_BYTES + 1)


def _token(*, raw: bytes, where: str) -> str:
    """The token in ``raw``, or why it cannot be one (never quoting it)."""
    if len(raw) > _MAX_TOKEN_BYTES:
        raise SpecInvalid([f"{where}: larger than {_MAX_TOKEN_BYTES} bytes; not a token"])
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise SpecInvalid([f"{where}: not ASCII text; not a token"]) from None
    if not _TOKEN.match(text):
        # A newline inside would split the Authorization header (and the HTTP client's error
        # would quote the header).
        raise SpecInvalid(
            [f"{where}: empty, or holds a space or control character inside; not a token"]
        )
    return text
