"""The kopf side of the operator: pod index, pool events and one daemon per pool.

Handlers are registered on a fresh :class:`kopf.OperatorRegistry` built per operator (so tests
can run several), and close over a :class:`Runtime` holding what they share. Pods are watched
once for the whole operator and kept in a kopf index of Ready pods by namespace; kopf fills it
before any daemon starts, so a pool's first decision never sees an empty membership by
accident. A pool's spec changes reach its running loop through ``@kopf.on.event`` (no restart,
no kopf bookkeeping annotations); its daemon stops on deletion and clears its targets.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Sequence
from typing import Any

import kopf
import pydantic

from trimtab.api.records import PoolKey
from trimtab.api.resource import GROUP, PLURAL, VERSION
from trimtab.api.spec import InferencePoolSpec
from trimtab.api.status import InferencePoolStatus
from trimtab.balancing.admitting import AdmissionFeed
from trimtab.balancing.loop import LoopSettings, PoolLoop, SourceFactory, TargetFactory
from trimtab.balancing.membership import Member, PodRecord, pod_record, select_members
from trimtab.balancing.spamfilter import SpamFilter
from trimtab.balancing.supervisor import supervise
from trimtab.kube import inference_extension
from trimtab.kube.client import KubeApi
from trimtab.kube.inference_extension import PickerService
from trimtab.kube.leadership import Leadership
from trimtab.kube.sink import KubePoolSink
from trimtab.targets.gate import XdsGate

__all__ = ["IndexedMembership", "Runtime", "build_registry"]

PODS_INDEX = "trimtab_pods"


class IndexedMembership:
    """Members of one namespaced pool, read from kopf's live pod index (no API calls)."""

    def __init__(self, *, index: kopf.Index[str, PodRecord], namespace: str) -> None:
        self._index = index
        self._namespace = namespace

    def members(self, *, spec: InferencePoolSpec) -> Sequence[Member]:
        if spec.endpoints is not None:  # static pools never look at pods
            return select_members(spec=spec, pods=())
        return select_members(spec=spec, pods=list(self._index.get(self._namespace, [])))


class Runtime:
    """What the handlers share: clients, factories, the xDS gate and the running loops."""

    def __init__(
        self,
        *,
        api: KubeApi,
        leadership: Leadership,
        sources: SourceFactory,
        targets: TargetFactory,
        gate: XdsGate,
        spam: SpamFilter,
        settings: LoopSettings,
        login: Callable[..., kopf.ConnectionInfo | None],
        admission: AdmissionFeed | None = None,
    ) -> None:
        self.admission = admission
        self.api = api
        self.leadership = leadership
        self.sources = sources
        self.targets = targets
        self.gate = gate
        self.spam = spam
        self.settings = settings
        self.login = login
        self.connection: kopf.ConnectionInfo | None = None
        self.connected = asyncio.Event()
        self.loops: dict[PoolKey, PoolLoop] = {}

    def current_connection(self) -> kopf.ConnectionInfo:
        if self.connection is None:
            raise RuntimeError("not logged in to Kubernetes yet")
        return self.connection

    def pool_seen(self, *, body: kopf.Body) -> None:
        key = PoolKey(namespace=body.metadata.namespace or "", name=body.metadata.name or "")
        self.gate.expect(key)
        loop = self.loops.get(key)
        if loop is not None:
            loop.update(raw_spec=copy.deepcopy(dict(body.spec)), generation=_generation(body))

    async def serve_pool(
        self,
        *,
        body: kopf.Body,
        pods: kopf.Index[str, PodRecord],
        stopped: kopf.DaemonStopped,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    ) -> None:
        namespace = body.metadata.namespace or ""
        key = PoolKey(namespace=namespace, name=body.metadata.name or "")
        sink = KubePoolSink(
            pool=key, body=body, api=self.api, leadership=self.leadership, logger=logger
        )
        loop = PoolLoop(
            pool=key,
            raw_spec=copy.deepcopy(dict(body.spec)),
            generation=_generation(body),
            membership=IndexedMembership(index=pods, namespace=namespace),
            sources=self.sources,
            targets=self.targets,
            sink=sink,
            spam=self.spam,
            settings=self.settings,
            logger=logger,
            seed=_seed_status(body),
            admission=self.admission,
            on_step=lambda: self.gate.settle(key),
        )
        self.loops[key] = loop

        def deleted() -> bool:
            reason = stopped.reason or kopf.DaemonStoppingReason(0)
            return bool(reason & kopf.DaemonStoppingReason.RESOURCE_DELETED)

        try:
            await supervise(
                loop=loop,
                stopping=stopped,
                deleted=deleted,
                close_timeout_s=self.settings.target_timeout_s,
            )
        finally:
            self.loops.pop(key, None)
        self.gate.settle(key)
        if deleted():
            self.spam.forget(pool=key)
            logger.info("Stopped balancing %s: the pool was deleted", key)


def build_registry(
    *, runtime: Runtime, picker_service: PickerService | None = None
) -> kopf.OperatorRegistry:
    """The operator's handlers; with ``picker_service`` also GIE InferencePools naming it."""
    registry = kopf.OperatorRegistry()
    if picker_service is not None:
        inference_extension.register(
            registry=registry, runtime=runtime, service=picker_service, pods_index=PODS_INDEX
        )

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info = runtime.login(**kwargs)
        runtime.connection = info
        if info is not None:
            runtime.connected.set()
        return info

    @kopf.index("v1", "pods", id=PODS_INDEX, registry=registry)
    def trimtab_pods(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, PodRecord]:
        record = pod_record(body)
        # An empty mapping, not None: kopf keeps a pod's old entry when an indexer returns None.
        return {namespace or "": record} if record is not None else {}

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    def pool_event(body: kopf.Body, type: str | None, **_: Any) -> None:
        if type != "DELETED":
            runtime.pool_seen(body=body)

    @kopf.daemon(GROUP, VERSION, PLURAL, registry=registry, cancellation_timeout=10.0)
    async def balance(
        body: kopf.Body,
        stopped: kopf.DaemonStopped,
        logger: kopf.Logger,
        **kwargs: Any,
    ) -> None:
        pods: kopf.Index[str, PodRecord] = kwargs[PODS_INDEX]
        runtime.pool_seen(body=body)
        await runtime.serve_pool(body=body, pods=pods, stopped=stopped, logger=logger)

    return registry


def _generation(body: kopf.Body) -> int | None:
    value = body.metadata.get("generation")
    return value if isinstance(value, int) else None


def _seed_status(body: kopf.Body) -> InferencePoolStatus | None:
    # The last status is where a restarted operator finds its weights; a status written by
    # an older version that no longer parses just means starting from equal weights.
    try:
        return InferencePoolStatus.model_validate(dict(body.status))
    except pydantic.ValidationError:
        return None
