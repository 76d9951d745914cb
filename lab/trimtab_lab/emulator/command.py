"""``trimtab emulate``: serve N emulated replicas until interrupted.

Example: ``trimtab emulate --replicas 3 --base-port 8001 --engine sglang --speeds 1,1,0.6
--time-scale 10`` serves three SGLang-looking replicas on ports 8001-8003, the third at 60 %
speed, all ten times faster than real time. The command prints one URL per replica, then
runs until SIGINT or SIGTERM and shuts every server down cleanly.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence

import click

from trimtab.api.spec import Engine
from trimtab_lab.emulator.exposition import SUPPORTED_ENGINES
from trimtab_lab.emulator.fleet import DEFAULT_MODEL, DEFAULT_PROFILE, emulate
from trimtab_lab.replica import PROFILE_NAMES

__all__ = ["emulate_command"]


def _parse_speeds(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[float, ...] | None:
    if value is None:
        return None
    try:
        return tuple(float(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give numbers separated by commas") from None


@click.command("emulate")
@click.option("--replicas", type=click.IntRange(min=1, max=1000), default=1, show_default=True)
@click.option(
    "--base-port",
    type=click.IntRange(min=1, max=65535),
    default=8000,
    show_default=True,
    help="Replica i listens on base-port + i.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--profile",
    type=click.Choice(PROFILE_NAMES),
    default=DEFAULT_PROFILE,
    show_default=True,
    help="Replica model profile (hardware and model).",
)
@click.option(
    "--engine",
    type=click.Choice([e.value for e in SUPPORTED_ENGINES]),
    default=Engine.VLLM.value,
    show_default=True,
    help="Engine whose /metrics format and names to serve.",
)
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Served model name.")
@click.option(
    "--speed",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Speed multiplier of every replica.",
)
@click.option(
    "--speeds",
    callback=_parse_speeds,
    help="Per-replica speed multipliers, comma separated (e.g. 1,1,0.6); overrides --speed.",
)
@click.option(
    "--time-scale",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Model seconds per wall second (10: ten times faster than real time).",
)
def emulate_command(
    *,
    replicas: int,
    base_port: int,
    host: str,
    profile: str,
    engine: str,
    model: str,
    speed: float,
    speeds: tuple[float, ...] | None,
    time_scale: float,
) -> None:
    """Serve emulated LLM replicas (OpenAI API, engine /metrics) until interrupted."""
    if speeds is not None and len(speeds) != replicas:
        raise click.BadParameter(
            f"got {len(speeds)} speeds for {replicas} replicas", param_hint="--speeds"
        )
    if base_port + replicas - 1 > 65535:
        raise click.BadParameter("ports would exceed 65535", param_hint="--base-port")
    asyncio.run(
        _serve(
            replicas=replicas,
            base_port=base_port,
            host=host,
            profile=profile,
            engine=Engine(engine),
            model=model,
            speeds=speeds or (speed,) * replicas,
            time_scale=time_scale,
        )
    )


async def _serve(
    *,
    replicas: int,
    base_port: int,
    host: str,
    profile: str,
    engine: Engine,
    model: str,
    speeds: Sequence[float],
    time_scale: float,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with emulate(
        replicas=replicas,
        engine=engine,
        profile=profile,
        speeds=speeds,
        time_scale=time_scale,
        base_port=base_port,
        host=host,
        model=model,
    ) as fleet:
        for server, replica_speed in zip(fleet.servers, speeds, strict=True):
            click.echo(f"http://{host}:{server.port}  speed={replica_speed:g}  engine={engine}")
        click.echo(f"serving {replicas} replica(s); Ctrl-C to stop", err=True)
        await stop.wait()
