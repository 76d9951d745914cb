"""Observed xDS state per connected Envoy: what was sent, what was ACKed, what was NACKed.

The ADS server records every response and every ACK/NACK here, per stream (one stream per
connected Envoy, named by its node id) and per resource type. Targets read it to say whether a
cluster's current resources are held by every connected Envoy (``Synced``), still in flight
(``AwaitingAck``) or rejected (``EnvoyNack``, with Envoy's own message). It is observed state
only; nothing here decides what to send.

A stream that has not acknowledged a cluster's current resources ``silent_after_s`` after it
opened and after the last response of the missing type is *silent*: it is named in the
message but no longer holds the condition, so one client that never ACKs (a hung Envoy, a
rogue client) cannot pin every pool at ``AwaitingAck``. When no connected stream holds the
resources and none is still awaited, the state is ``EnvoySilent``.
Envoy's own text (NACK messages, node ids) is cleaned with :func:`clean_text` before it is
stored, so status and logs get no control characters and a bounded length.
"""

from __future__ import annotations

import itertools
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from trimtab.api.reasons import TargetReason
from trimtab.targets.base import TargetState

__all__ = ["AckLedger", "StreamStatus", "TypeStatus", "clean_text"]

_EMPTY: Mapping[str, str] = MappingProxyType({})
NACK_TEXT_LIMIT = 256
NODE_TEXT_LIMIT = 128
_NODES_LISTED = 5  # a message names at most this many nodes, then "and N more"


def clean_text(text: str, *, limit: int) -> str:
    """``text`` on one line, without control or format characters, at most ``limit`` long.

    Control characters become spaces and runs of whitespace one space, so a forged line break
    cannot start a log line. A longer text keeps its head and its tail around an ellipsis:
    Envoy puts the rejected proto first and the reason last.
    """
    bounded = text[: 64 * limit] if len(text) > 64 * limit else text
    cleaned = " ".join(
        "".join(
            " " if unicodedata.category(char) in _UNPRINTABLE else char for char in bounded
        ).split()
    )
    if len(cleaned) <= limit:
        return cleaned
    head = limit // 4
    return f"{cleaned[:head]} … {cleaned[len(cleaned) - (limit - head - 3) :]}"


_UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


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
    """Envoy's error message for the last response, when it rejected it (cleaned)."""
    sent_at: float | None = None
    """Clock time of the last response of this type."""


@dataclass(frozen=True)
class StreamStatus:
    stream_id: int
    node: str
    opened_at: float = 0.0
    types: Mapping[str, TypeStatus] = field(default_factory=dict)


class AckLedger:
    """Per-stream, per-type records; mutated only by the ADS server's stream handlers."""

    def __init__(
        self, *, silent_after_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._streams: dict[int, StreamStatus] = {}
        self._ids = itertools.count(1)
        self._silent_after_s = silent_after_s
        self._clock = clock

    def open_stream(self, *, node: str) -> int:
        stream_id = next(self._ids)
        self._streams[stream_id] = StreamStatus(
            stream_id=stream_id, node=node, opened_at=self._clock()
        )
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
            sent_at=self._clock(),
        )

    def acked(self, stream_id: int, *, type_url: str) -> None:
        status = self.type_status(stream_id, type_url)
        self._update(
            stream_id,
            type_url,
            acked_version=status.sent_version,
            acked=status.pending,
            nack="",
        )

    def nacked(self, stream_id: int, *, type_url: str, message: str) -> None:
        nack = clean_text(message, limit=NACK_TEXT_LIMIT) or "rejected without a message"
        self._update(stream_id, type_url, nack=nack)

    def type_status(self, stream_id: int, type_url: str) -> TypeStatus:
        stream = self._streams.get(stream_id)
        if stream is None:
            return TypeStatus()
        return stream.types.get(type_url, TypeStatus())

    def cluster_state(self, cluster: str, *, digests: Mapping[str, str]) -> TargetState:
        """Whether every stream holds ``digests`` (type URL → digest) for ``cluster``.

        A stream that lacks them is waited for until ``silent_after_s`` has passed since it
        opened and since the last response of a missing type; after that it is silent.
        """
        if not self._streams:
            return TargetState(
                False, TargetReason.NO_ENVOY_CONNECTED, "no Envoy is connected to trimtab"
            )
        now = self._clock()
        waiting: list[str] = []
        silent: list[str] = []
        holding = 0
        for stream in self._streams.values():
            missing = [
                stream.types.get(type_url, TypeStatus())
                for type_url, digest in digests.items()
                if stream.types.get(type_url, TypeStatus()).acked.get(cluster) != digest
            ]
            if not missing:
                holding += 1
                continue
            for type_url, digest in digests.items():
                status = stream.types.get(type_url, TypeStatus())
                if status.nack and status.pending.get(cluster) == digest:
                    return TargetState(
                        False, TargetReason.ENVOY_NACK, f"{stream.node}: {status.nack}"
                    )
            since = max([stream.opened_at, *(s.sent_at for s in missing if s.sent_at is not None)])
            (silent if now - since > self._silent_after_s else waiting).append(stream.node)
        quiet = (
            f"; {_nodes(silent)} silent (no acknowledgement within {self._silent_after_s:g}s)"
            if silent
            else ""
        )
        if waiting:
            return TargetState(
                False,
                TargetReason.AWAITING_ACK,
                f"waiting for {_nodes(waiting)} to acknowledge{quiet}",
            )
        if not holding:
            return TargetState(
                False,
                TargetReason.ENVOY_SILENT,
                f"no connected Envoy acknowledged within {self._silent_after_s:g}s: "
                f"{_nodes(silent)}",
            )
        message = f"acknowledged by {holding} Envoy(s){quiet}"
        return TargetState(True, TargetReason.SYNCED, message)

    def _update(self, stream_id: int, type_url: str, **changes: object) -> None:
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        status = replace(stream.types.get(type_url, TypeStatus()), **changes)  # type: ignore[arg-type]
        self._streams[stream_id] = replace(stream, types={**stream.types, type_url: status})


def _nodes(nodes: list[str]) -> str:
    unique = sorted(set(nodes))
    listed = ", ".join(unique[:_NODES_LISTED])
    more = len(unique) - _NODES_LISTED
    return f"{listed} and {more} more" if more > 0 else listed
