"""Emulated vLLM pods on distinct loopback addresses, and a bounded load to pin one of them.

A real pool has one IP per pod and one target port for all; Linux routes all of 127.0.0.0/8 to
loopback, so pod ``i`` here is an emulator replica bound to ``127.0.0.{i + 2}`` on a port that
is free on every one of those addresses. :func:`serve_pods` stops every replica on exit, also
when a later one fails to start. :func:`pinned` keeps a batch of long streaming requests open
against one replica and cancels them all on exit (or at its deadline, whichever comes first).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import httpx

from trimtab_lab.emulator.fleet import DEFAULT_MODEL, emulate

__all__ = ["Load", "Pod", "free_port", "pinned", "serve_pods"]

_PORT_ATTEMPTS = 50


@dataclass(frozen=True, kw_only=True)
class Pod:
    """One emulated replica as the pool sees it: a pod name, its IP and the shared port."""

    name: str
    ip: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"


def free_port(*, hosts: Sequence[str]) -> int:
    """A TCP port nothing listens on at any of ``hosts`` right now (probed by binding)."""
    for _ in range(_PORT_ATTEMPTS):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            first.bind((hosts[0], 0))
            port: int = first.getsockname()[1]
            try:
                for host in hosts[1:]:
                    other = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                    other.bind((host, port))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                continue
            return port
    raise RuntimeError(f"no port free on all of {list(hosts)} in {_PORT_ATTEMPTS} attempts")


@contextlib.asynccontextmanager
async def serve_pods(*, names: Sequence[str]) -> AsyncIterator[list[Pod]]:
    """One vLLM-format emulator per name, on 127.0.0.2, .3, ... and one common port."""
    ips = [f"127.0.0.{index + 2}" for index in range(len(names))]
    async with contextlib.AsyncExitStack() as outer:
        port = 0
        for attempt in range(3):
            port = free_port(hosts=ips)
            stack = contextlib.AsyncExitStack()
            try:
                for ip in ips:
                    await stack.enter_async_context(emulate(host=ip, base_port=port))
            except OSError as exc:
                await stack.aclose()
                # Another process took the port between the probe and the bind: probe again.
                if exc.errno != errno.EADDRINUSE or attempt == 2:
                    raise
                continue
            except BaseException:
                await stack.aclose()
                raise
            outer.push_async_exit(stack)
            break
        yield [Pod(name=n, ip=ip, port=port) for n, ip in zip(names, ips, strict=True)]


@dataclass
class Load:
    """What :func:`pinned` has seen so far: streams admitted and the first failure, if any."""

    admitted: int = 0
    error: str | None = None


async def _stream(
    *, client: httpx.AsyncClient, pod: Pod, prompt_tokens: int, max_tokens: int, load: Load
) -> None:
    body = {
        "model": DEFAULT_MODEL,
        "prompt_tokens": prompt_tokens,
        "max_tokens": max_tokens,
        "stream": True,
    }
    try:
        async with client.stream("POST", f"{pod.url}/v1/completions", json=body) as response:
            if response.status_code != httpx.codes.OK:
                load.error = load.error or f"HTTP {response.status_code}"
                return
            load.admitted += 1
            async for _ in response.aiter_bytes():
                pass  # bounded by max_tokens and by the caller's cancellation
    except httpx.HTTPError as exc:
        load.error = load.error or f"{type(exc).__name__}: {exc}"


@contextlib.asynccontextmanager
async def pinned(
    pod: Pod,
    *,
    requests: int,
    prompt_tokens: int,
    max_tokens: int,
    deadline_s: float,
) -> AsyncIterator[Load]:
    """Keep ``requests`` long streams open on ``pod`` until exit or ``deadline_s``."""
    load = Load()
    limits = httpx.Limits(max_connections=requests, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(deadline_s), limits=limits) as client:
        tasks = [
            asyncio.create_task(
                _stream(
                    client=client,
                    pod=pod,
                    prompt_tokens=prompt_tokens,
                    max_tokens=max_tokens,
                    load=load,
                ),
                name=f"load {index} on {pod.name}",
            )
            for index in range(requests)
        ]
        stopper = asyncio.get_running_loop().call_later(
            deadline_s, lambda: [task.cancel() for task in tasks]
        )
        try:
            yield load
        finally:
            stopper.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
