"""In a cluster: refused pools say why, and a Secret's token never reaches status, events or logs.

The real kopf operator runs against the emulated API server (``kube``) with the installer's
settings under test; a Prometheus stand-in on 127.0.0.1 echoes the Authorization header back
in its error body, as the issue found a real proxy doing. The captured log (every logger, at
DEBUG), the pool's status and every event of the namespace are searched for the token.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp.web
import pytest
import pytest_asyncio

from support.emulators import free_port
from support.kube import Cluster
from trimtab.balancing.sources import PrometheusUrlRule, SourceSettings
from trimtab.kube.running import OperatorConfig

from .conftest import LABELS, LOOP, NAMESPACE, POOL, OperatorThread, condition, eventually

TOKEN = "tt-4be7-SECRET-FROM-A-SECRET-91ac"


@pytest_asyncio.fixture()
async def echoing_prometheus() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A Prometheus stand-in answering 400 with the caller's Authorization header in the body."""
    seen: list[dict[str, str]] = []

    async def answer(request: aiohttp.web.Request) -> aiohttp.web.Response:
        seen.append(dict(request.headers))
        echoed = request.headers.get("Authorization", "")
        return aiohttp.web.json_response(
            {"status": "error", "error": f"unauthorized: {echoed}"}, status=400
        )

    port = free_port(hosts=["127.0.0.1"])
    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    try:
        await aiohttp.web.TCPSite(runner, "127.0.0.1", port).start()
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def _operator(kube: Cluster, settings: SourceSettings) -> OperatorThread:
    config = OperatorConfig(
        namespaces=[NAMESPACE],
        connection=kube.connection,
        loop=LOOP,
        scanning=False,
        source_settings=settings,
    )
    runner = OperatorThread(config=config)
    runner.start()
    return runner


def _pool(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": LABELS},
        "targetPorts": [{"number": 8000}],
        "metrics": {"interval": "200ms", "staleAfter": "1s"},
        "targets": [{"envoy": {"cluster": POOL}}],
    }
    spec.update(overrides)
    return spec


async def test_static_endpoints_are_refused_with_the_reason(kube: Cluster) -> None:
    operator = await _operator(kube, SourceSettings())
    try:
        spec = _pool(selector=None, endpoints=[{"name": "vm", "address": "10.9.9.9", "port": 80}])
        await kube.create_pool(namespace=NAMESPACE, name=POOL, spec=spec)
        await eventually(
            lambda: condition(kube, "Ready").get("reason") == "SpecInvalid",
            what="Ready=False/SpecInvalid",
        )
    finally:
        await operator.stop()
    ready = condition(kube, "Ready")
    assert ready["status"] == "False"
    assert "--allow-static-endpoints" in ready["message"]
    assert any(
        "--allow-static-endpoints" in e.get("message", "")
        for e in kube.events(namespace=NAMESPACE, reason="SpecInvalid")
    )


async def test_a_secret_token_echoed_by_prometheus_stays_out(
    kube: Cluster,
    echoing_prometheus: tuple[str, list[dict[str, str]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    url, seen = echoing_prometheus
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "prom-token", "namespace": NAMESPACE},
        "data": {"token": base64.b64encode(f"{TOKEN}\n".encode()).decode()},
    }
    await Cluster._ok(kube.kube.post(f"/api/v1/namespaces/{NAMESPACE}/secrets", json=secret))
    await kube.put_pod(namespace=NAMESPACE, name="vllm-0", labels=LABELS, ip="127.0.0.2")
    settings = SourceSettings(prometheus_urls=(PrometheusUrlRule.parse(url),), secret_tokens=True)
    operator = await _operator(kube, settings)
    try:
        spec = _pool(
            metrics={
                "source": "prometheus",
                "interval": "200ms",
                "staleAfter": "1s",
                "prometheus": {
                    "url": url,
                    "timeout": "1s",
                    "bearerTokenSecretRef": {"name": "prom-token", "key": "token"},
                },
            }
        )
        await kube.create_pool(namespace=NAMESPACE, name=POOL, spec=spec)
        await eventually(
            lambda: "HTTP 400" in json.dumps(kube.pool(namespace=NAMESPACE, name=POOL)),
            what="the Prometheus failure in status",
        )
        await eventually(
            lambda: kube.events(namespace=NAMESPACE, reason="MetricsStale"),
            what="a MetricsStale event",
        )
    finally:
        await operator.stop()
    assert any(r.get("Authorization") == f"Bearer {TOKEN}" for r in seen)
    status = json.dumps(kube.pool(namespace=NAMESPACE, name=POOL))
    events = json.dumps(kube.events(namespace=NAMESPACE))
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for where, text in (("status", status), ("events", events), ("log", logged)):
        assert TOKEN not in text, where
        assert "unauthorized:" not in text, where
