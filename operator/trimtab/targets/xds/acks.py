"""Observed xDS state per connected Envoy: what was sent, what was ACKed, what was NACKed.

The ADS server records every response and every ACK/NACK here, per stream (one stream per
connected Envoy, named by its node id) and per resource type. Targets read it to say whether a
cluster's current resources are held by every connected Envoy (``Synced``), still in flight
(``AwaitingAck``) or rejected (``EnvoyNack``, with Envoy's own message). It is observed state
only; nothing here decides what to send.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from trimtab.targets.base import TargetState

__all__ = ["AckLedger", "StreamStatus", "TypeStatus"]

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class TypeStatus:
    """One resource type on one stream. Digest maps are cluster name → resource digest."""

    sent_version: str = ""
    sent_nonce: str = ""
    acked_version: str = ""
    acked: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """What the Envoy holds after its last ACK."""
    pending: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """What the Envoy will hold once it ACKs the last response."""
    nack: str = ""
    """Envoy's error message for the last response, when it rejected it."""


@dataclass(frozen=True)
class StreamStatus:
    stream_id: int
    node: str
    types: Mapping[str, TypeStatus] = field(default_factory=dict)


class AckLedger:
    """Per-stream, per-type records; mutated only by the ADS server's stream handlers."""

    def __init__(self) -> None:
        self._streams: dict[int, StreamStatus] = {}
        self._ids = itertools.count(1)

    def open_stream(self, *, node: str) -> int:
        stream_id = next(self._ids)
        self._streams[stream_id] = StreamStatus(stream_id=stream_id, node=node)
        return stream_id

    def close_stream(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)

    def streams(self) -> tuple[StreamStatus, ...]:
        return tuple(self._streams.values())

    def sent(
        self,
        stream_id: int,
        *,
        type_url: str,
        version: str,
        nonce: str,
        pending: Mapping[str, str],
    ) -> None:
        self._update(
            stream_id,
            type_url,
            sent_version=version,
            sent_nonce=nonce,
            pending=MappingProxyType(dict(pending)),
        )

    def acked(self, stream_id: int, *, type_url: str) -> None:
        status = self.type_status(stream_id, type_url)
        self._update(
            stream_id, type_url, acked_version=status.sent_version, acked=status.pending, nack=""
        )

    def nacked(self, stream_id: int, *, type_url: str, message: str) -> None:
        self._update(stream_id, type_url, nack=message or "rejected without a message")

    def type_status(self, stream_id: int, type_url: str) -> TypeStatus:
        stream = self._streams.get(stream_id)
        if stream is None:
            return TypeStatus()
        return stream.types.get(type_url, TypeStatus())

    def cluster_state(self, cluster: str, *, digests: Mapping[str, str]) -> TargetState:
        """Whether every stream holds ``digests`` (type URL → digest) for ``cluster``."""
        if not self._streams:
            return TargetState(False, "NoEnvoyConnected", "no Envoy is connected to trimtab")
        waiting: list[str] = []
        for stream in self._streams.values():
            for type_url, digest in digests.items():
                status = stream.types.get(type_url, TypeStatus())
                if status.acked.get(cluster) == digest:
                    continue
                if status.nack and status.pending.get(cluster) == digest:
                    return TargetState(False, "EnvoyNack", f"{stream.node}: {status.nack}")
                waiting.append(stream.node)
        if waiting:
            nodes = ", ".join(sorted(set(waiting)))
            return TargetState(False, "AwaitingAck", f"waiting for {nodes} to acknowledge")
        return TargetState(True, "Synced", f"acknowledged by {len(self._streams)} Envoy(s)")

    def _update(self, stream_id: int, type_url: str, **changes: object) -> None:
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        status = replace(stream.types.get(type_url, TypeStatus()), **changes)  # type: ignore[arg-type]
        self._streams[stream_id] = replace(stream, types={**stream.types, type_url: status})
