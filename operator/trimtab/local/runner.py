"""Run pools from a file with the operator's loop, xDS server and /metrics, no Kubernetes.

Every pool gets the same :class:`~trimtab.balancing.loop.PoolLoop` as in a cluster, with
static membership and the :class:`~trimtab.local.statusfile.LocalSink`. Events are rate-limited
the same way and logged. Runs until ``stop`` is set, then stops every loop and flushes the file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from pathlib import Path

from trimtab import tasks
from trimtab.balancing.loop import LoopSettings, PoolLoop, SourceFactory, TargetFactory
from trimtab.balancing.membership import StaticMembership
from trimtab.balancing.services import run_services
from trimtab.balancing.sources import Sources, SourceSettings
from trimtab.balancing.spamfilter import SpamFilter
from trimtab.balancing.supervisor import supervise
from trimtab.local.pools import load_pools
from trimtab.local.statusfile import LocalSink, StatusFile, read_statuses
from trimtab.targets.factory import BuiltinTargets, TargetSettings
from trimtab.targets.xds.server import XdsSecurity

__all__ = ["run_local"]

logger = logging.getLogger(__name__)


async def run_local(
    *,
    pools_file: Path,
    status_file: Path | None,
    xds_port: int | None,
    metrics_port: int | None,
    stop: asyncio.Event,
    bind_address: str = "127.0.0.1",
    xds_security: XdsSecurity | None = None,
    picker_port: int | None = None,
    settings: LoopSettings | None = None,
    sources: SourceFactory | None = None,
    targets: TargetFactory | None = None,
    source_settings: SourceSettings | None = None,
    envoy_file_dir: Path | None = None,
) -> None:
    """Balance the pools of ``pools_file`` until ``stop``; raises SpecInvalid on a bad file.

    Without ``source_settings`` pools may query any Prometheus URL, without a token; static
    endpoints are always allowed (they are all local mode has). ``envoyFile.path`` targets
    must lie inside ``envoy_file_dir``, by default the pools file's directory.
    """
    loaded = await asyncio.to_thread(load_pools, pools_file)
    if stop.is_set():
        # Stopped while a large file was loading: start nothing only to stop it again.
        logger.info("Stopped before balancing started")
        return
    for problem in loaded.problems:
        logger.error("Not serving: %s", problem)
    pools = loaded.pools
    settings = settings or LoopSettings()
    local_sources = dataclasses.replace(
        source_settings or SourceSettings(any_prometheus_url=True), static_endpoints=True
    )
    local_targets = TargetSettings(envoy_file_dir=envoy_file_dir or pools_file.parent)
    async with run_services(
        xds_port=xds_port,
        metrics_port=metrics_port,
        host=bind_address,
        xds_security=xds_security,
        picker_port=picker_port,
    ) as services:
        restored = await asyncio.to_thread(read_statuses, status_file)
        file = StatusFile(path=status_file, restored=restored)
        spam = SpamFilter(clock=asyncio.get_running_loop().time)
        loops: list[PoolLoop] = []
        for pool in pools:
            services.gate.expect(pool.key)
            loops.append(
                PoolLoop(
                    pool=pool.key,
                    raw_spec=pool.raw_spec,
                    generation=None,
                    membership=StaticMembership(),
                    sources=sources or Sources(api=None, settings=local_sources),
                    targets=targets
                    or BuiltinTargets(
                        cache=services.cache, config_maps=None, settings=local_targets
                    ),
                    sink=LocalSink(pool=pool.key, file=file),
                    spam=spam,
                    settings=settings,
                    logger=logger,
                    on_step=functools.partial(services.gate.settle, pool.key),
                    seed=restored.get(str(pool.key)),
                    admission=services.admission,
                )
            )
        supervised = [
            tasks.start(supervise(loop=loop, stopping=stop), name=f"supervising {loop.pool}")
            for loop in loops
        ]
        logger.info("Balancing %d pools from %s", len(loops), pools_file)
        try:
            await asyncio.gather(*supervised)
        finally:
            await tasks.stop(*supervised)
            await file.aclose()
