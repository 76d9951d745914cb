"""One ADS stream (one connected Envoy): the state-of-the-world protocol for CDS and EDS.

Follows the xDS spec: a request whose nonce is not the last one sent is stale and ignored; a
request carrying ``error_detail`` is a NACK (recorded with Envoy's message, and the rejected
version is not sent again until the snapshot changes); otherwise it ACKs the last response.
A second request carrying an already-answered nonce is a re-request (Envoy sends one for EDS
after a cluster changed) and gets the resources again, or the new cluster would wait for its
initial fetch timeout (15 s). CDS responses hold every cluster; EDS responses hold only the
subscribed assignments that differ from what this Envoy has acknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from envoy.service.discovery.v3 import discovery_pb2

from trimtab.targets.xds.acks import NACK_TEXT_LIMIT, NODE_TEXT_LIMIT, AckLedger, clean_text
from trimtab.targets.xds.snapshots import CLUSTER_TYPE, ENDPOINT_TYPE, TYPE_URLS, Snapshot

__all__ = ["AdsStream"]

logger = logging.getLogger("trimtab.xds")

Writer = Callable[[bytes], Awaitable[None]]
"""Sends one serialized ``DiscoveryResponse``."""


@dataclass
class _Subscription:
    """What this stream asked for and was last sent, for one resource type."""

    names: frozenset[str] = field(default_factory=frozenset)
    waiting: bool = False
    """Envoy has a request open (go-control-plane's "watch"): only then do we respond."""
    sent_version: str = ""
    sent_nonce: str = ""
    answered: bool = False
    """A request already carried ``sent_nonce`` (so another one is a re-request)."""
    rejected_version: str = ""


class AdsStream:
    """Protocol state of one stream; the server feeds it requests and snapshot changes."""

    def __init__(
        self,
        *,
        ledger: AckLedger,
        snapshot: Callable[[], Snapshot | None],
        write: Writer,
        nonce_prefix: str,
    ) -> None:
        self._ledger = ledger
        self._snapshot = snapshot
        self._write = write
        self._nonce_prefix = nonce_prefix
        self._nonces = 0
        self._subs: dict[str, _Subscription] = {}
        self.stream_id: int | None = None
        self.node = ""

    def close(self) -> None:
        if self.stream_id is not None:
            self._ledger.close_stream(self.stream_id)

    async def on_request(self, request: Any) -> None:
        if self.stream_id is None:
            # The id is the client's text: cleaned, it cannot forge a log line or a status.
            self.node = clean_text(request.node.id, limit=NODE_TEXT_LIMIT) or "(unnamed node)"
            self.stream_id = self._ledger.open_stream(node=self.node)
            logger.info("Envoy %s connected", self.node)
        type_url: str = request.type_url
        if type_url not in TYPE_URLS:
            logger.debug(
                "node %s asked for unserved type %s",
                self.node,
                clean_text(type_url, limit=NODE_TEXT_LIMIT),
            )
            return
        sub = self._subs.setdefault(type_url, _Subscription())
        nonce: str = request.response_nonce
        if nonce and nonce != sub.sent_nonce:
            return  # stale: answers a response that a newer one superseded
        force = not nonce  # a new stream (or a new type on it) always gets the current state
        if request.HasField("error_detail"):
            self._on_nack(type_url, sub, request.error_detail.message)
        elif nonce and sub.answered:
            force = True
        elif nonce:
            self._ledger.acked(self.stream_id, type_url=type_url)
        sub.answered = bool(nonce)
        names = frozenset(request.resource_names)
        if names != sub.names:
            sub.names = names
            force = True
        sub.waiting = True
        await self._respond(type_url, sub, force=force)

    async def on_change(self) -> None:
        # Clusters first, so that Envoy never gets endpoints for a cluster it lacks.
        for type_url in TYPE_URLS:
            sub = self._subs.get(type_url)
            if sub is not None:
                await self._respond(type_url, sub, force=False)

    def _on_nack(self, type_url: str, sub: _Subscription, message: str) -> None:
        assert self.stream_id is not None
        if sub.answered:
            return  # already recorded for this nonce
        sub.rejected_version = sub.sent_version
        self._ledger.nacked(self.stream_id, type_url=type_url, message=message)
        logger.warning(
            "Envoy %s rejected %s version %s: %s",
            self.node,
            type_url.rsplit(".", 1)[-1],
            sub.sent_version,
            clean_text(message, limit=NACK_TEXT_LIMIT),
        )

    async def _respond(self, type_url: str, sub: _Subscription, *, force: bool) -> None:
        snapshot = self._snapshot()
        if snapshot is None or not sub.waiting or self.stream_id is None:
            return
        version = snapshot.versions[type_url]
        if version == sub.rejected_version or (version == sub.sent_version and not force):
            return
        if type_url == CLUSTER_TYPE:
            resources = snapshot.resources(type_url, ())  # CDS: always the whole world
        elif sub.names:
            resources = snapshot.resources(type_url, sub.names)
        else:
            return  # EDS with no names: nothing subscribed
        chosen = resources
        if type_url == ENDPOINT_TYPE and not force:
            acked = self._ledger.type_status(self.stream_id, type_url).acked
            chosen = tuple(r for r in resources if acked.get(r.name) != r.digest)
            if not chosen:
                return
        self._nonces += 1
        nonce = f"{self._nonce_prefix}-{self._nonces}"
        header = discovery_pb2.DiscoveryResponse(
            version_info=version, type_url=type_url, nonce=nonce
        )
        response = b"".join([header.SerializeToString(), *(r.response_field for r in chosen)])
        sub.sent_version, sub.sent_nonce, sub.answered, sub.waiting = version, nonce, False, False
        self._ledger.sent(
            self.stream_id,
            type_url=type_url,
            version=version,
            nonce=nonce,
            pending={r.name: r.digest for r in resources},
        )
        await self._write(response)
