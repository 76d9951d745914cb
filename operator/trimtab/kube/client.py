"""A small async Kubernetes API client for what kopf does not do for us.

kopf watches and posts events; trimtab also writes pool status from a long-running loop,
renews a Lease and reads Secrets. This client uses the same :class:`kopf.ConnectionInfo`
that kopf logged in with (see ``running.py``), has a timeout on every call, and translates
httpx and HTTP errors into :mod:`trimtab.errors` at this one place. Bodies of error
responses are cut to 256 characters so that a Secret never ends up in a log line whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import kopf

from trimtab.errors import KubeApiError, KubeConflict, KubeNotFound

__all__ = [
    "KubeApi",
]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeApi:
    """JSON in, JSON out; ``connect`` gives the current credentials (re-read after a 401)."""

    def __init__(
        self, *, connect: Callable[[], kopf.ConnectionInfo], timeout_s: float = 10.0
    ) -> None:
        self._connect = connect
        self._timeout = httpx.Timeout(timeout_s)
        self._client: httpx.AsyncClient | None = None
        self._info: kopf.ConnectionInfo | None = None

    async def get(self, path: str) -> dict[str, Any]:
        return await self._call("GET", path)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call("POST", path, body=body)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """RFC 7386 merge patch; ``metadata.resourceVersion`` in it acts as a precondition."""
        return await self._call("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        """RFC 6902 JSON patch; a failing ``test`` operation is answered 422 (KubeConflict)."""
        try:
            return await self._call("PATCH", path, body=ops, content_type=JSON_PATCH)
        except KubeApiError as exc:
            if exc.status == 422 and "test" in str(exc).lower():
                raise KubeConflict(str(exc), status=422) from exc
            raise

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT; ``metadata.resourceVersion`` in ``body`` makes it conditional (409 if stale)."""
        return await self._call("PUT", path, body=body)

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """DELETE; ``body`` may carry ``preconditions`` (uid, resourceVersion)."""
        return await self._call("DELETE", path, body=body)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | list[dict[str, Any]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        for attempt in (1, 2):
            client = await self._ensure(fresh=attempt == 2)
            try:
                response = await client.request(
                    method,
                    path,
                    content=json.dumps(body).encode() if body is not None else None,
                    headers={"Content-Type": content_type} if body is not None else None,
                )
            except httpx.HTTPError as exc:
                raise KubeApiError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            if response.status_code == 401 and attempt == 1:
                continue  # credentials rotated: log in again once
            return _result(method=method, path=path, response=response)
        raise AssertionError("unreachable: the second attempt always returns or raises")

    async def _ensure(self, *, fresh: bool) -> httpx.AsyncClient:
        if self._client is not None and not fresh:
            return self._client
        info = self._connect()
        if self._client is not None and info == self._info:
            return self._client
        await self.aclose()
        self._info = info
        self._client = httpx.AsyncClient(
            base_url=info.server,
            verify=info.as_ssl_context() if info.server.startswith("https") else False,
            headers={"Accept": "application/json", **info.as_http_headers()},
            timeout=self._timeout,
        )
        return self._client


def _result(*, method: str, path: str, response: httpx.Response) -> dict[str, Any]:
    if response.is_success:
        data = response.json() if response.content else {}
        return data if isinstance(data, dict) else {}
    message = f"{method} {path}: HTTP {response.status_code}: {response.text[:256]}"
    if response.status_code == 404:
        raise KubeNotFound(message, status=404)
    if response.status_code == 409:
        raise KubeConflict(message, status=409)
    raise KubeApiError(message, status=response.status_code)
