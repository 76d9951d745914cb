"""Hostile metrics pages, served by a child process (their cost stays out of trimtab's and the
test's memory): ``python hostile_pages.py HOST:PORT:KIND ...`` serves each kind on its address.

- ``huge``: a valid vLLM page followed by 50 MB of comment lines, streamed as it is written.
- ``slow``: a valid page, one byte per second.
- ``garbage``: 2 MiB of random bytes (no text, no newline discipline).
- ``labels``: one wanted sample line whose label set repeats 200,000 times (~4 MB).
- ``healthy``: a small valid vLLM page.
"""

from __future__ import annotations

import asyncio
import os
import sys

import aiohttp.web

HEALTHY = (
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="m"} 1\n'
    b"# TYPE vllm:num_requests_waiting gauge\n"
    b'vllm:num_requests_waiting{model_name="m"} 0\n'
    b"# TYPE vllm:gpu_cache_usage_perc gauge\n"
    b'vllm:gpu_cache_usage_perc{model_name="m"} 0.2\n'
    b"# TYPE vllm:kv_cache_usage_perc gauge\n"
    b'vllm:kv_cache_usage_perc{model_name="m"} 0.2\n'
)
HUGE_BYTES = 50 * 1000 * 1000
_CHUNK = b"# " + b"x" * 1021 + b"\n"


async def page(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
    kind = request.app["kind"]
    if kind == "healthy":
        return aiohttp.web.Response(body=HEALTHY, content_type="text/plain")
    if kind == "garbage":
        return aiohttp.web.Response(body=os.urandom(2 * 1024 * 1024), content_type="text/plain")
    if kind == "labels":
        labels = ",".join(['model_name="m"'] * 200_000)
        line = f"vllm:num_requests_running{{{labels}}} 1\n".encode()
        return aiohttp.web.Response(body=HEALTHY + line, content_type="text/plain")
    response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    try:
        if kind == "huge":
            await response.write(HEALTHY)
            for _ in range(HUGE_BYTES // len(_CHUNK)):
                await response.write(_CHUNK)
        elif kind == "slow":
            for byte in HEALTHY:
                await response.write(bytes([byte]))
                await asyncio.sleep(1.0)
    except ConnectionError:  # trimtab stopped reading: the point of the cap
        pass
    return response


async def main(specs: list[str]) -> None:
    runners = []
    for spec in specs:
        host, port, kind = spec.split(":")
        app = aiohttp.web.Application()
        app["kind"] = kind
        app.router.add_get("/metrics", page)
        runner = aiohttp.web.AppRunner(app)
        await runner.setup()
        await aiohttp.web.TCPSite(runner, host, int(port)).start()
        runners.append(runner)
    print("serving", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
