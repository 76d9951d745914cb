"""Real local servers for the metrics tests: exposition pages, a hung pod, and Prometheus.

Every server binds 127.0.0.1 on a port the OS picks and is torn down even when a test fails.
Prometheus is the Debian binary; without it the tests skip locally and fail in CI (CI=true).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from aiohttp import web

from support.prometheus import ScrapeTarget, require_prometheus, run_prometheus

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def page(text: str) -> Handler:
    """A handler that always answers ``text`` as Prometheus text exposition."""

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(text=text, content_type="text/plain")

    return handle


@dataclass
class Servers:
    """Starts one aiohttp app per call, each on its own port, all stopped at teardown."""

    runners: list[web.AppRunner]
    released: asyncio.Event

    async def serve(self, handler: Handler, *, path: str = "/metrics") -> int:
        app = web.Application()
        app.router.add_route("*", path, handler)
        runner = web.AppRunner(app, shutdown_timeout=1.0)
        await runner.setup()
        self.runners.append(runner)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(runner, sock)
        await site.start()
        port: int = sock.getsockname()[1]
        return port

    async def serve_hanging(self) -> int:
        """A pod that accepts and never answers (until teardown)."""

        async def hang(request: web.Request) -> web.StreamResponse:
            await asyncio.wait_for(self.released.wait(), timeout=60)
            return web.Response(text="")

        return await self.serve(hang)


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    found = Servers(runners=[], released=asyncio.Event())
    try:
        yield found
    finally:
        found.released.set()
        for runner in found.runners:
            await runner.cleanup()


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass(frozen=True)
class Target:
    """One scrape target for Prometheus with the target labels it should attach."""

    port: int
    labels: dict[str, str]


StartPrometheus = Callable[[list[Target]], Awaitable[str]]


@pytest.fixture
async def prometheus(tmp_path: Path) -> AsyncIterator[StartPrometheus]:
    """Start a real Prometheus scraping ``targets`` every second; returns its base URL."""
    binary = require_prometheus()
    async with contextlib.AsyncExitStack() as stack:

        async def start(targets: list[Target]) -> str:
            scrape = [
                ScrapeTarget(address="127.0.0.1", port=t.port, labels=t.labels) for t in targets
            ]
            server = await stack.enter_async_context(
                run_prometheus(targets=scrape, workdir=tmp_path, binary=binary)
            )
            return server.url

        yield start


T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout_s: float = 20.0, every_s: float = 0.25
) -> T:
    """Poll ``probe`` until it returns something other than ``None``, bounded in time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        found = await probe()
        if found is not None:
            return found
        if loop.time() >= deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(every_s)
