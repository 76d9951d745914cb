"""The CamelCase reasons trimtab writes into conditions, events and target states.

They are an interface: ``docs/operations.md`` lists them and the Helm chart's alerts match
them verbatim, so each is a :class:`~enum.StrEnum` whose value is the wire string. One enum
per condition (its reasons are exactly what that condition can say) plus the event reasons;
``TargetsSynced`` reports the first failing target's own :class:`TargetReason`.
"""

from __future__ import annotations

import enum

__all__ = [
    "DegradedReason",
    "EventReason",
    "EventType",
    "MetricsReason",
    "ReadyReason",
    "TargetReason",
]


class ReadyReason(enum.StrEnum):
    BALANCING = "Balancing"
    """The spec is valid and at least one member is Ready."""
    NO_READY_PODS = "NoReadyPods"
    SPEC_INVALID = "SpecInvalid"
    """The message names each bad field."""


class MetricsReason(enum.StrEnum):
    METRICS_READ = "MetricsRead"
    SOURCE_UNAVAILABLE = "SourceUnavailable"
    """The source could not be built or read (down, timed out, a missing Secret)."""
    NO_SERIES = "NoSeries"
    """The source answered but knows no running/waiting/KV series for any pod."""


class DegradedReason(enum.StrEnum):
    AS_EXPECTED = "AsExpected"
    DEGRADED = "Degraded"


class TargetReason(enum.StrEnum):
    """Why a target holds, or does not hold, a pool's latest decision."""

    SYNCED = "Synced"
    PENDING = "Pending"
    """The target's first apply has not finished: not a failure yet."""
    TIMEOUT = "Timeout"
    TARGET_ERROR = "TargetError"
    """An unexpected exception in the target (a bug)."""
    TARGET_SYNC_FAILED = "TargetSyncFailed"
    TARGET_UNAVAILABLE = "TargetUnavailable"
    """This build or mode cannot serve the target kind."""
    NOT_APPLIED = "NotApplied"
    INVALID_DECISION = "InvalidDecision"
    CLUSTER_CONFLICT = "ClusterConflict"
    EDS_WRITE_FAILED = "EdsWriteFailed"
    CONFIG_MAP_WRITE_FAILED = "ConfigMapWriteFailed"
    XDS_NOT_READY = "XdsNotReady"
    """Held back until every pool has a restored or fresh decision."""
    NO_ENVOY_CONNECTED = "NoEnvoyConnected"
    AWAITING_ACK = "AwaitingAck"
    ENVOY_NACK = "EnvoyNack"
    ENVOY_SILENT = "EnvoySilent"
    """Connected Envoys stayed silent past the acknowledgement deadline."""
    HTTP_ROUTE_NOT_FOUND = "HTTPRouteNotFound"
    RULE_NOT_FOUND = "RuleNotFound"
    """The HTTPRoute has no rule of that name (or index)."""
    REFERENCE_NOT_PERMITTED = "ReferenceNotPermitted"
    """A route in another namespace and no ReferenceGrant in the pool's namespace allowing it."""
    ROUTE_CONTESTED = "RouteContested"
    """Another writer keeps replacing the rule's backendRefs that trimtab wrote."""
    ROUTE_NOT_ACCEPTED = "RouteNotAccepted"
    """A parent Gateway reports Accepted=False on the HTTPRoute."""
    BACKEND_REFS_NOT_RESOLVED = "BackendRefsNotResolved"
    """A parent Gateway reports ResolvedRefs=False on the HTTPRoute."""
    NO_GATEWAY_STATUS = "NoGatewayStatus"
    """No Gateway reported on the route (or observed trimtab's last write) within the grace."""
    OBJECT_NOT_OWNED = "ObjectNotOwned"
    """A Service or EndpointSlice of a tier's name exists and is not trimtab's."""
    GATEWAY_API_WRITE_FAILED = "GatewayAPIWriteFailed"


class EventType(enum.StrEnum):
    """``core/v1`` Event.type."""

    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(enum.StrEnum):
    SPEC_INVALID = "SpecInvalid"
    NO_READY_PODS = "NoReadyPods"
    METRICS_STALE = "MetricsStale"
    METRICS_RECOVERED = "MetricsRecovered"
    TARGET_SYNC_FAILED = "TargetSyncFailed"
    POD_WARMING = "PodWarming"
    POD_DRAINED = "PodDrained"
    REBALANCED = "Rebalanced"
    QUEUE_SHEDDING = "QueueShedding"
    QUEUE_RECOVERED = "QueueRecovered"
