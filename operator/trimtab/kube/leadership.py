"""Leader election over a ``coordination.k8s.io/v1`` Lease, for status and event writes.

Every replica balances and serves xDS (Envoy may connect to any of them); only the leader
writes pool status and posts events, so two replicas never fight over a status or double an
event. The protocol is client-go's: the holder renews ``renewTime`` every ``renew_s``; a
candidate takes the Lease over when ``renewTime + leaseDurationSeconds`` has passed. Writes
carry ``metadata.resourceVersion`` as a precondition, so of two candidates exactly one wins
(the other gets 409). A leader that cannot renew within the duration steps down on its own.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
from collections.abc import Callable
from typing import Any, Protocol

from trimtab.api.times import parse_time
from trimtab.errors import KubeApiError, KubeConflict, KubeNotFound
from trimtab.kube.client import KubeApi

__all__ = ["AlwaysLeader", "Leadership", "LeaseElector"]


class Leadership(Protocol):
    """Read by sinks before each write."""

    @property
    def is_leader(self) -> bool: ...


class AlwaysLeader:
    """Leader election disabled: a single replica writes."""

    @property
    def is_leader(self) -> bool:
        return True


class LeaseElector:
    """Holds or watches one Lease; :meth:`run` is a task owned by the operator."""

    def __init__(
        self,
        *,
        api: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        duration_s: float = 15.0,
        renew_s: float = 5.0,
        logger: logging.Logger,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._api = api
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._create_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._name = name
        self._namespace = namespace
        self._identity = identity
        self._duration_s = duration_s
        self._renew_s = renew_s
        self._logger = logger
        self._clock = clock
        self._leader_until: datetime.datetime | None = None

    @property
    def is_leader(self) -> bool:
        return self._leader_until is not None and self._clock() < self._leader_until

    async def run(self) -> None:
        while True:
            try:
                await self.try_acquire_or_renew()
            except KubeApiError as exc:
                self._logger.warning("Lease %s not renewed: %s", self._name, exc)
            await asyncio.sleep(self._renew_s)

    async def try_acquire_or_renew(self) -> bool:
        """One round of the protocol; returns whether this replica leads afterwards."""
        now = self._clock()
        was = self.is_leader
        try:
            lease = await self._api.get(self._path)
        except KubeNotFound:
            return await self._write(create=True, lease=None, now=now, was=was)
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity")
        renewed = parse_time(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self._duration_s)
        expired = renewed is None or now > renewed + datetime.timedelta(seconds=duration)
        if holder != self._identity and not expired:
            self._step_down(was=was)
            return False
        return await self._write(create=False, lease=lease, now=now, was=was)

    async def _write(
        self, *, create: bool, lease: dict[str, Any] | None, now: datetime.datetime, was: bool
    ) -> bool:
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec: dict[str, Any] = {
            "holderIdentity": self._identity,
            # Whole seconds on the wire: round up, so that no candidate takes over before this
            # replica's own deadline (1.5 s written as 1 gave two leaders for half a second).
            "leaseDurationSeconds": max(1, math.ceil(self._duration_s)),
            "renewTime": stamp,
        }
        held = lease is not None and lease.get("spec", {}).get("holderIdentity") == self._identity
        if not held:
            spec["acquireTime"] = stamp
            transitions = (lease or {}).get("spec", {}).get("leaseTransitions") or 0
            spec["leaseTransitions"] = transitions + (0 if create else 1)
        try:
            if create:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self._name, "namespace": self._namespace},
                    "spec": spec,
                }
                await self._api.create(self._create_path, body)
            else:
                assert lease is not None
                version = lease.get("metadata", {}).get("resourceVersion")
                await self._api.merge_patch(
                    self._path, {"metadata": {"resourceVersion": version}, "spec": spec}
                )
        except KubeConflict:
            self._step_down(was=was)
            return False
        self._leader_until = now + datetime.timedelta(seconds=self._duration_s)
        if not was:
            self._logger.info("Became the leader (Lease %s/%s)", self._namespace, self._name)
        return True

    def _step_down(self, *, was: bool) -> None:
        self._leader_until = None
        if was:
            self._logger.info("Lost the leadership (Lease %s/%s)", self._namespace, self._name)
