"""trimtab as the endpoint picker (EPP) of Gateway API Inference Extension InferencePools.

A GIE ``InferencePool`` (``inference.networking.k8s.io/v1``) whose ``endpointPickerRef`` names
trimtab's picker Service (name and port, in the pool's own namespace: the reference has no
namespace) is balanced like a trimtab pool and admitted by the picker: its members are the
Ready pods its ``selector.matchLabels`` picks, one endpoint per pod and ``targetPorts`` entry;
its settings (engine, metrics, policy, admission) come from the trimtab ``InferencePool`` that
the annotation ``trimtab.io/policy`` names in the same namespace, else the defaults (engine
vllm, direct metrics). Admission is always the picker's: the gateway routes only where the
picker says. The picker knows the pool as ``<namespace>/infpool/<name>``.

Nothing is ever written to the GIE object, which belongs to its author and its gateways
(``status.parents``): kopf only watches it (``@kopf.on.event``, no daemon, so no finalizer
and no kopf annotations), loops are started and stopped here, and the pool's events are
posted on the GIE object by the Lease holder. Its status is not written anywhere; the
picker's and the pool's metrics carry it (``docs/gateway-api.md``).
"""

from __future__ import annotations

import asyncio
import copy
import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import kopf

from trimtab import tasks
from trimtab.admission import AdmissionStats
from trimtab.api.records import Decision, Endpoint, PodName, PodSample, PoolKey
from trimtab.api.resource import GROUP, PLURAL, VERSION
from trimtab.api.spec import InferencePoolSpec
from trimtab.api.status import InferencePoolStatus
from trimtab.balancing.admitting import PickerFeed
from trimtab.balancing.loop import PoolLoop
from trimtab.balancing.membership import Member, PodRecord, selector_matches
from trimtab.balancing.reporting import Report
from trimtab.balancing.supervisor import supervise
from trimtab.kube.leadership import Leadership
from trimtab.targets.base import Target

if TYPE_CHECKING:
    from trimtab.kube.handlers import Runtime

__all__ = [
    "GIE_GROUP",
    "POLICY_ANNOTATION",
    "FailureMode",
    "GieEventReason",
    "PickerService",
    "failure_mode",
    "picker_pool_name",
    "refers_to",
    "register",
    "trimtab_spec",
]

GIE_GROUP = "inference.networking.k8s.io"
GIE_VERSION = "v1"
GIE_PLURAL = "inferencepools"
POLICY_ANNOTATION = "trimtab.io/policy"
POLICIES_INDEX = "trimtab_policies"
# The spec model needs a target; a GIE pool has none (its gateway routes), and the factory of
# its loop builds nothing for this one.
_NO_TARGET = {"envoy": {"cluster": "gie-inferencepool"}}
_SETTINGS = ("engine", "metrics", "policy", "admission")

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]
logger = logging.getLogger(__name__)


class FailureMode(enum.StrEnum):
    FAIL_OPEN = "FailOpen"
    FAIL_CLOSE = "FailClose"


class GieEventReason(enum.StrEnum):
    POLICY_NOT_FOUND = "PolicyNotFound"
    """The ``trimtab.io/policy`` annotation names no trimtab InferencePool: defaults apply."""
    POLICY_FOUND = "PolicyFound"
    """The named policy exists (again): its settings apply."""


@dataclass(frozen=True, kw_only=True)
class PickerService:
    """trimtab's picker Service as GIE pools reference it: name and Service port."""

    name: str
    port: int

    @classmethod
    def parse(cls, text: str, *, default_port: int) -> PickerService:
        """``NAME`` or ``NAME:PORT`` (the Service port; default: the picker's own port)."""
        name, _, port = text.partition(":")
        if not name or (port and not port.isdigit()):
            raise ValueError(f"expected NAME or NAME:PORT, got {text!r}")
        number = int(port) if port else default_port
        if not 1 <= number <= 65535:
            raise ValueError(f"port {number} is outside 1..65535")
        return cls(name=name, port=number)


def refers_to(*, gie_spec: Mapping[str, Any], service: PickerService) -> bool:
    """Whether the GIE pool's ``endpointPickerRef`` is trimtab's picker Service and port."""
    ref = gie_spec.get("endpointPickerRef") or {}
    port = (ref.get("port") or {}).get("number")
    return (
        (ref.get("group") or "") == ""
        and (ref.get("kind") or "Service") == "Service"
        and ref.get("name") == service.name
        and port == service.port
    )


def failure_mode(gie_spec: Mapping[str, Any]) -> FailureMode:
    """The pool's ``endpointPickerRef.failureMode``; the CRD's default is FailClose."""
    value = (gie_spec.get("endpointPickerRef") or {}).get("failureMode")
    return FailureMode.FAIL_OPEN if value == FailureMode.FAIL_OPEN else FailureMode.FAIL_CLOSE


def picker_pool_name(*, namespace: str, name: str) -> str:
    """The picker's name of a GIE pool (the ``x-trimtab-pool`` value that selects it).

    trimtab pools are known by ``<namespace>/<cluster>`` and a cluster name has no ``/``, so
    ``<namespace>/infpool/<name>`` never collides with one (a trimtab pool of the same name is
    a common sight: the policy).
    """
    return f"{namespace}/infpool/{name}"


def trimtab_spec(
    *, gie_spec: Mapping[str, Any], policy: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The trimtab spec a GIE pool is balanced with: its members, the policy's settings."""
    settings = {key: copy.deepcopy(policy[key]) for key in _SETTINGS if policy and key in policy}
    selector = gie_spec.get("selector") or {}
    protocol = "h2c" if gie_spec.get("appProtocol") == "kubernetes.io/h2c" else "http"
    return {
        **settings,
        "admission": {**settings.get("admission", {}), "mode": "picker"},
        "selector": {"matchLabels": dict(selector.get("matchLabels") or {})},
        "targetPorts": [{"number": p.get("number")} for p in gie_spec.get("targetPorts") or []],
        "appProtocol": protocol,
        "targets": [copy.deepcopy(_NO_TARGET)],
    }


class GieMembership:
    """Ready pods of the pool's namespace that its selector picks, one member per target port.

    GIE addresses every ``podIP:port`` as an endpoint of its own (data-parallel ranks), so a
    pool of several ports has members ``<pod>-<port>``.
    """

    def __init__(self, *, index: kopf.Index[str, PodRecord], namespace: str) -> None:
        self._index = index
        self._namespace = namespace

    def members(self, *, spec: InferencePoolSpec) -> Sequence[Member]:
        if spec.selector is None:
            return []
        selector = spec.selector
        ports = [p.number for p in spec.target_ports]
        chosen = sorted(
            (
                pod
                for pod in self._index.get(self._namespace, [])
                if selector_matches(selector=selector, labels=pod.labels)
            ),
            key=lambda pod: pod.name,
        )
        return [
            Member(
                endpoint=Endpoint(
                    name=PodName(pod.name if len(ports) == 1 else f"{pod.name}-{port}"),
                    address=pod.ip,
                    port=port,
                ),
                ready_since=pod.ready_since,
            )
            for pod in chosen
            for port in ports
        ]


class GieSink:
    """Events on the GIE object (Lease holder only); the status goes nowhere."""

    def __init__(self, *, body: kopf.Body, leadership: Leadership) -> None:
        self._body = body
        self._leadership = leadership

    def publish(
        self, *, report: Report, confirm: Callable[[InferencePoolStatus], None]
    ) -> Sequence[str]:
        if not self._leadership.is_leader:
            return ()
        for event in report.events:
            kopf.event(self._body, type=event.type, reason=event.reason, message=event.message)
        return [event.reason for event in report.events]

    async def close(self, *, deleted: bool) -> None:
        return None


class NoTargets:
    """The target factory of GIE pools: the gateway routes, trimtab only picks."""

    def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> Sequence[Target]:
        return ()


class GieFeed:
    """The picker feed of one GIE pool: its decisions under its picker name."""

    def __init__(self, *, feed: PickerFeed, name: str) -> None:
        self._feed = feed
        self._name = name

    def offer(
        self,
        *,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        members: Sequence[Member],
        samples: Mapping[PodName, PodSample],
        now: float,
    ) -> AdmissionStats | None:
        return self._feed.offer_as(
            name=self._name,
            pool=pool,
            spec=spec,
            decision=decision,
            members=members,
            samples=samples,
            now=now,
        )

    def forget(self, *, pool: PoolKey) -> None:
        self._feed.forget(pool=pool)


class _Served:
    """One served GIE pool: its loop, the task running it, and what was last announced."""

    def __init__(self, *, loop: PoolLoop, body: kopf.Body, close_timeout_s: float) -> None:
        self.loop = loop
        self.body = body
        self.policy: str | None = None
        self.policy_found = True
        self.deleted = False
        """Set before the task is stopped: the loop then closes as deleted."""
        self.task = tasks.start(
            supervise(
                loop=loop,
                stopping=asyncio.Event(),
                deleted=lambda: self.deleted,
                close_timeout_s=close_timeout_s,
            ),
            name=f"picking for GIE InferencePool {loop.pool}",
        )


class InferenceExtension:
    """The GIE pools this operator serves: one balancing loop each, started and stopped here."""

    def __init__(self, *, runtime: Runtime, service: PickerService, feed: PickerFeed) -> None:
        self._runtime = runtime
        self._service = service
        self._feed = feed
        self._served: dict[PoolKey, _Served] = {}

    async def seen(
        self,
        *,
        body: kopf.Body,
        pods: kopf.Index[str, PodRecord],
        policies: kopf.Index[tuple[str, str], Mapping[str, Any]],
        log: Logger,
    ) -> None:
        key = PoolKey(namespace=body.metadata.namespace or "", name=body.metadata.name or "")
        gie_spec = dict(body.spec)
        if not refers_to(gie_spec=gie_spec, service=self._service):
            if key in self._served:
                log.info("GIE InferencePool %s no longer names trimtab's picker", key)
                await self.gone(key=key)
            return
        policy_name = body.metadata.annotations.get(POLICY_ANNOTATION) or None
        policy = None
        if policy_name is not None:
            policy = next(iter(policies.get((key.namespace, policy_name), [])), None)
        raw = trimtab_spec(gie_spec=gie_spec, policy=policy)
        served = self._served.get(key)
        if served is None:
            served = self._start(key=key, body=body, raw=raw, pods=pods, log=log)
        else:
            served.body = body
            served.loop.update(raw_spec=raw, generation=_generation(body))
        self._policy_state(served, name=policy_name, found=policy is not None)

    def policy_changed(self, *, namespace: str, name: str, spec: Mapping[str, Any] | None) -> None:
        """A trimtab InferencePool changed (``spec``) or went away (``None``)."""
        for key, served in self._served.items():
            if key.namespace != namespace or served.policy != name:
                continue
            raw = trimtab_spec(gie_spec=dict(served.body.spec), policy=spec)
            served.loop.update(raw_spec=raw, generation=_generation(served.body))
            self._policy_state(served, name=name, found=spec is not None)

    async def gone(self, *, key: PoolKey) -> None:
        served = self._served.pop(key, None)
        if served is None:
            return
        served.deleted = True
        await tasks.stop(served.task)
        self._runtime.spam.forget(pool=served.loop.pool)
        logger.info("Stopped picking for GIE InferencePool %s", key)

    async def close(self) -> None:
        served = list(self._served.values())
        self._served.clear()
        await tasks.stop(*(s.task for s in served))

    def _start(
        self,
        *,
        key: PoolKey,
        body: kopf.Body,
        raw: dict[str, Any],
        pods: kopf.Index[str, PodRecord],
        log: Logger,
    ) -> _Served:
        # Its own key: a trimtab pool of the same name is a different pool (telemetry, feed).
        loop_key = PoolKey(namespace=key.namespace, name=f"infpool/{key.name}")
        runtime = self._runtime
        loop = PoolLoop(
            pool=loop_key,
            raw_spec=raw,
            generation=_generation(body),
            membership=GieMembership(index=pods, namespace=key.namespace),
            sources=runtime.sources,
            targets=NoTargets(),
            sink=GieSink(body=body, leadership=runtime.leadership),
            spam=runtime.spam,
            settings=runtime.settings,
            logger=log,
            admission=GieFeed(
                feed=self._feed, name=picker_pool_name(namespace=key.namespace, name=key.name)
            ),
        )
        served = _Served(loop=loop, body=body, close_timeout_s=runtime.settings.target_timeout_s)
        self._served[key] = served
        log.info(
            "Picking for GIE InferencePool %s as picker pool %s (failureMode %s)",
            key,
            picker_pool_name(namespace=key.namespace, name=key.name),
            failure_mode(dict(body.spec)).value,
        )
        return served

    def _policy_state(self, served: _Served, *, name: str | None, found: bool) -> None:
        announce = name is not None and (name != served.policy or found != served.policy_found)
        served.policy, served.policy_found = name, found or name is None
        if not announce or not self._runtime.leadership.is_leader:
            return
        if found:
            message = f"Settings from trimtab InferencePool {name}"
            kopf.event(
                served.body, type="Normal", reason=GieEventReason.POLICY_FOUND, message=message
            )
        else:
            message = (
                f"{POLICY_ANNOTATION}: no trimtab InferencePool {name} in this namespace; "
                "serving with the defaults (engine vllm, direct metrics)"
            )
            kopf.event(
                served.body,
                type="Warning",
                reason=GieEventReason.POLICY_NOT_FOUND,
                message=message,
            )


def register(
    *,
    registry: kopf.OperatorRegistry,
    runtime: Runtime,
    service: PickerService,
    pods_index: str,
) -> InferenceExtension:
    """Add the GIE handlers to ``registry``; GIE pools are then served through the picker."""
    feed = runtime.admission
    if not isinstance(feed, PickerFeed):
        raise ValueError("GIE InferencePools need the endpoint picker (--picker-port)")
    extension = InferenceExtension(runtime=runtime, service=service, feed=feed)

    @kopf.index(GROUP, VERSION, PLURAL, id=POLICIES_INDEX, registry=registry)
    def trimtab_policies(
        body: kopf.Body, namespace: str | None, name: str | None, **_: Any
    ) -> dict[tuple[str, str], dict[str, Any]]:
        return {(namespace or "", name or ""): copy.deepcopy(dict(body.spec))}

    @kopf.on.event(GROUP, VERSION, PLURAL, id="gie_policy_event", registry=registry)
    def policy_event(body: kopf.Body, type: str | None, **_: Any) -> None:
        spec = None if type == "DELETED" else copy.deepcopy(dict(body.spec))
        extension.policy_changed(
            namespace=body.metadata.namespace or "", name=body.metadata.name or "", spec=spec
        )

    @kopf.on.event(GIE_GROUP, GIE_VERSION, GIE_PLURAL, id="gie_pool_event", registry=registry)
    async def gie_event(
        body: kopf.Body, type: str | None, logger: kopf.Logger, **kwargs: Any
    ) -> None:
        if type == "DELETED":
            key = PoolKey(namespace=body.metadata.namespace or "", name=body.metadata.name or "")
            await extension.gone(key=key)
            return
        await extension.seen(
            body=body, pods=kwargs[pods_index], policies=kwargs[POLICIES_INDEX], log=logger
        )

    @kopf.on.cleanup(id="gie_cleanup", registry=registry)
    async def stop_gie_pools(**_: Any) -> None:
        await extension.close()

    return extension


def _generation(body: kopf.Body) -> int | None:
    value = body.metadata.get("generation")
    return value if isinstance(value, int) else None
