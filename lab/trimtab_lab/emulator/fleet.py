"""Start and stop several emulated replicas together: the emulator's library entry point.

``async with emulate(replicas=3, speeds=[1, 1, 0.6]) as fleet:`` starts three servers on
127.0.0.1 (free ports, or ``base_port + i``) and stops all of them on exit, also when the body
or a later start fails, so tests and demos never leak a listener or a driver task.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from trimtab.api.spec import Engine
from trimtab_lab.emulator.exposition import SUPPORTED_ENGINES
from trimtab_lab.emulator.server import ReplicaConfig, ReplicaServer
from trimtab_lab.replica import get_profile

__all__ = ["DEFAULT_MODEL", "DEFAULT_PROFILE", "Fleet", "emulate"]

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_PROFILE = "llama3-8b-h100"


@dataclass(frozen=True, kw_only=True)
class Fleet:
    """Running replicas, in order; index ``i`` has speed ``speeds[i]``."""

    servers: tuple[ReplicaServer, ...]

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(server.port for server in self.servers)

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(server.url for server in self.servers)


@contextlib.asynccontextmanager
async def emulate(
    *,
    replicas: int = 1,
    engine: Engine = Engine.VLLM,
    profile: str = DEFAULT_PROFILE,
    speeds: Sequence[float] | None = None,
    time_scale: float = 1.0,
    base_port: int | None = None,
    host: str = "127.0.0.1",
    model: str = DEFAULT_MODEL,
    prefix_block_tokens: int | None = None,
) -> AsyncIterator[Fleet]:
    """Serve ``replicas`` emulated replicas for the duration of the ``async with`` block.

    ``speeds`` gives one multiplier per replica (default all 1.0); ``base_port`` None picks
    free ports. ``prefix_block_tokens`` turns prefix caching on at that block size.
    ``ValueError`` for an unknown profile, an unsupported engine or bad sizes.
    """
    configs = _configs(
        replicas=replicas,
        engine=engine,
        profile=profile,
        speeds=speeds,
        time_scale=time_scale,
        model=model,
        prefix_block_tokens=prefix_block_tokens,
    )
    servers = tuple(ReplicaServer(config=config) for config in configs)
    try:
        for index, server in enumerate(servers):
            await server.start(host=host, port=0 if base_port is None else base_port + index)
        yield Fleet(servers=servers)
    finally:
        for server in servers:
            await server.stop()


def _configs(
    *,
    replicas: int,
    engine: Engine,
    profile: str,
    speeds: Sequence[float] | None,
    time_scale: float,
    model: str,
    prefix_block_tokens: int | None = None,
) -> list[ReplicaConfig]:
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    if engine not in SUPPORTED_ENGINES:
        known = ", ".join(e.value for e in SUPPORTED_ENGINES)
        raise ValueError(f"the emulator cannot speak engine {engine.value!r}; use one of {known}")
    speeds = [1.0] * replicas if speeds is None else list(speeds)
    if len(speeds) != replicas:
        raise ValueError(f"got {len(speeds)} speeds for {replicas} replicas; give one each")
    if not all(speed > 0 for speed in speeds):
        raise ValueError(f"speeds must be > 0, got {speeds}")
    if not time_scale > 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    try:
        found = get_profile(profile)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    if prefix_block_tokens is not None and (
        prefix_block_tokens < 1 or prefix_block_tokens % found.block_size
    ):
        raise ValueError(
            f"prefix_block_tokens must be a positive multiple of {found.block_size}, "
            f"got {prefix_block_tokens}"
        )
    return [
        ReplicaConfig(
            engine=engine,
            profile=found,
            model=model,
            speed=speed,
            time_scale=time_scale,
            prefix_block_tokens=prefix_block_tokens,
        )
        for speed in speeds
    ]
