"""No secret byte reaches the status, the events or the log (issue 12, "Secrets and files leak").

Each test runs the real local-mode loop (``run_local``, in this process so every log record is
captured at DEBUG, events included: local mode logs them) against Prometheus stand-ins on
127.0.0.1 and 127.0.0.2 that misbehave as the issue found, then greps the captured log and the
status file for the secret. The stand-ins record every request, so "never contacted" and "the
token never went there" are counted, not assumed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import pytest
import yaml

from support.emulators import free_port
from trimtab.balancing.loop import LoopSettings
from trimtab.balancing.reporting import ReportSettings
from trimtab.balancing.sources import PrometheusUrlRule, SourceSettings, TokenSource
from trimtab.local.runner import run_local

from .conftest import poll

TOKEN = "tt-9f1c2e-SECRET-TOKEN-7d41"
PASSWD = "root:x:0:0:root:/root:/bin/bash"
PASSWORD = "pa55-w0rd-XYZZY"
_LOOP = LoopSettings(
    read_timeout_floor_s=0.5,
    invalid_recheck_s=0.2,
    report=ReportSettings(min_write_interval_s=0.2, heartbeat_s=2.0),
)

Handler = Callable[[aiohttp.web.Request], Awaitable[aiohttp.web.StreamResponse]]


@dataclass
class Upstream:
    """An HTTP server on one 127.0.0.x that records what it was sent."""

    url: str
    requests: list[dict[str, str]] = field(default_factory=list)


@asynccontextmanager
async def upstream(*, host: str, handler: Handler) -> AsyncIterator[Upstream]:
    port = free_port(hosts=[host])
    served = Upstream(url=f"http://{host}:{port}")

    async def recording(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        served.requests.append(dict(request.headers))
        return await handler(request)

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", recording)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    try:
        await aiohttp.web.TCPSite(runner, host, port).start()
        yield served
    finally:
        await runner.cleanup()


def _pool(*, name: str, prometheus: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "trimtab.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "endpoints": [
                {"name": "a", "address": "127.0.0.1", "port": free_port(hosts=["127.0.0.1"])}
            ],
            "metrics": {
                "source": "prometheus",
                "interval": "200ms",
                "staleAfter": "1s",
                "prometheus": {"timeout": "1s", **prometheus},
            },
            "targets": [{"envoy": {"cluster": name}}],
        },
    }


@dataclass(frozen=True, kw_only=True)
class Outcome:
    status: dict[str, Any]
    everything: str
    """The status file and every log record (messages and tracebacks), as one text."""


async def _run(
    *,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    pools: list[dict[str, Any]],
    settings: SourceSettings,
    until: Callable[[dict[str, Any]], bool],
) -> Outcome:
    caplog.set_level(logging.DEBUG)
    pools_file = tmp_path / "pools.yaml"
    pools_file.write_text(yaml.safe_dump_all(pools))
    status_file = tmp_path / "status.json"
    stop = asyncio.Event()
    run = asyncio.create_task(
        run_local(
            pools_file=pools_file,
            status_file=status_file,
            xds_port=None,
            metrics_port=None,
            stop=stop,
            settings=_LOOP,
            source_settings=settings,
        )
    )

    async def written() -> dict[str, Any]:
        try:
            found: dict[str, Any] = json.loads(status_file.read_text())
        except (OSError, ValueError):
            return {}
        return found if until(found) else {}

    try:
        status = await poll(written, timeout_s=15, what="the status the test waits for")
        await asyncio.sleep(1.0)  # a few more ticks: retries, events, heartbeats
    finally:
        stop.set()
        await asyncio.wait_for(run, timeout=10)
    logged = "\n".join(f"{r.getMessage()}\n{caplog_text(r)}" for r in caplog.records)
    return Outcome(status=status, everything=status_file.read_text() + "\n" + logged)


def caplog_text(record: logging.LogRecord) -> str:
    if record.exc_info is None:
        return ""
    return logging.Formatter().formatException(record.exc_info)


def _ready(status: dict[str, Any], pool: str) -> dict[str, Any]:
    conditions = status.get(f"default/{pool}", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), {})


def _message_mentions(pool: str, text: str) -> Callable[[dict[str, Any]], bool]:
    def check(status: dict[str, Any]) -> bool:
        return text in json.dumps(status.get(f"default/{pool}", {}))

    return check


async def _answer_400_echoing(request: aiohttp.web.Request) -> aiohttp.web.Response:
    echoed = request.headers.get("Authorization", "")
    body = {"status": "error", "errorType": "bad_data", "error": f"bad query; you sent {echoed}"}
    return aiohttp.web.json_response(body, status=400)


async def test_a_token_file_with_a_newline_is_refused_without_quoting_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n{PASSWD}\n")
    async with upstream(host="127.0.0.1", handler=_answer_400_echoing) as prometheus:
        outcome = await _run(
            tmp_path=tmp_path,
            caplog=caplog,
            pools=[_pool(name="llama", prometheus={"url": prometheus.url, "tokenSource": "mon"})],
            settings=SourceSettings(
                prometheus_urls=(PrometheusUrlRule.parse(prometheus.url),),
                token_sources=(TokenSource.parse(f"mon={token_file}"),),
            ),
            until=_message_mentions("llama", "control character"),
        )
    assert TOKEN not in outcome.everything
    assert PASSWD not in outcome.everything
    assert "root:x" not in outcome.everything
    assert str(token_file) not in outcome.everything
    assert prometheus.requests == []  # a source that cannot be built sends nothing


async def test_an_error_body_echoing_the_token_stays_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    async with upstream(host="127.0.0.1", handler=_answer_400_echoing) as prometheus:
        outcome = await _run(
            tmp_path=tmp_path,
            caplog=caplog,
            pools=[_pool(name="llama", prometheus={"url": prometheus.url, "tokenSource": "mon"})],
            settings=SourceSettings(
                prometheus_urls=(PrometheusUrlRule.parse(prometheus.url),),
                token_sources=(TokenSource.parse(f"mon={token_file}"),),
            ),
            until=_message_mentions("llama", "HTTP 400"),
        )
    # The token did go where it was allowed to, and came back in the body.
    assert any(r.get("Authorization") == f"Bearer {TOKEN}" for r in prometheus.requests)
    assert TOKEN not in outcome.everything
    assert "you sent" not in outcome.everything  # no part of the upstream body at all


async def test_a_url_with_userinfo_is_refused_and_never_printed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with upstream(host="127.0.0.1", handler=_answer_400_echoing) as prometheus:
        with_password = prometheus.url.replace("http://", f"http://admin:{PASSWORD}@")
        good = _pool(name="good", prometheus={"url": prometheus.url})
        outcome = await _run(
            tmp_path=tmp_path,
            caplog=caplog,
            pools=[good, _pool(name="bad", prometheus={"url": with_password})],
            settings=SourceSettings(any_prometheus_url=True),
            until=_message_mentions("good", "HTTP 400"),
        )
    assert PASSWORD not in outcome.everything
    assert "must not hold a user or password" in outcome.everything
    assert all("Authorization" not in r for r in prometheus.requests)


async def test_a_redirect_to_another_origin_is_not_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)

    async def missing(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.Response(status=404)

    async with upstream(host="127.0.0.2", handler=missing) as elsewhere:

        async def redirect(request: aiohttp.web.Request) -> aiohttp.web.Response:
            raise aiohttp.web.HTTPFound(location=f"{elsewhere.url}{request.path_qs}")

        async with upstream(host="127.0.0.1", handler=redirect) as prometheus:
            outcome = await _run(
                tmp_path=tmp_path,
                caplog=caplog,
                pools=[
                    _pool(name="llama", prometheus={"url": prometheus.url, "tokenSource": "mon"})
                ],
                settings=SourceSettings(
                    prometheus_urls=(PrometheusUrlRule.parse(prometheus.url),),
                    token_sources=(TokenSource.parse(f"mon={token_file}"),),
                ),
                until=_message_mentions("llama", "redirects are not followed"),
            )
    assert prometheus.requests, "the allowed Prometheus was asked"
    assert elsewhere.requests == []  # not even without the token
    assert TOKEN not in outcome.everything


async def test_a_url_off_the_list_is_never_contacted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    async with (
        upstream(host="127.0.0.1", handler=_answer_400_echoing) as allowed,
        upstream(host="127.0.0.2", handler=_answer_400_echoing) as other,
    ):
        outcome = await _run(
            tmp_path=tmp_path,
            caplog=caplog,
            pools=[
                _pool(name="with-token", prometheus={"url": other.url, "tokenSource": "mon"}),
                _pool(name="without", prometheus={"url": other.url}),
            ],
            settings=SourceSettings(
                prometheus_urls=(PrometheusUrlRule.parse(allowed.url),),
                token_sources=(TokenSource.parse(f"mon={token_file}"),),
            ),
            until=lambda s: all(
                _ready(s, p).get("reason") == "SpecInvalid" for p in ("with-token", "without")
            ),
        )
    assert other.requests == []
    assert allowed.requests == []
    assert "not on the operator's --prometheus-url list" in _ready(
        outcome.status, "with-token"
    ).get("message", "")
    assert TOKEN not in outcome.everything


async def test_locally_an_unlisted_url_gets_no_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    async with upstream(host="127.0.0.2", handler=_answer_400_echoing) as other:
        outcome = await _run(
            tmp_path=tmp_path,
            caplog=caplog,
            pools=[_pool(name="llama", prometheus={"url": other.url, "tokenSource": "mon"})],
            settings=SourceSettings(
                any_prometheus_url=True, token_sources=(TokenSource.parse(f"mon={token_file}"),)
            ),
            until=lambda s: _ready(s, "llama").get("reason") == "SpecInvalid",
        )
    assert other.requests == []
    assert "a token is sent only to a URL on" in _ready(outcome.status, "llama")["message"]
    assert TOKEN not in outcome.everything
