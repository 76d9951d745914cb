"""trimtab's own errors, one family per boundary.

Third-party errors (httpx, grpc, kubernetes, prometheus-api-client) are translated into these
at exactly one place each, so callers and the controller's retry logic never depend on a
library's exception tree.
"""

from __future__ import annotations

__all__ = [
    "KubeApiError",
    "KubeConflict",
    "KubeNotFound",
    "MetricsError",
    "NotAllowed",
    "SourceUnavailable",
    "SpecInvalid",
    "TargetSyncError",
    "TrimtabError",
    "XdsConflict",
    "XdsError",
    "XdsServerError",
    "XdsSnapshotInvalid",
]


class TrimtabError(Exception):
    """Base of every error trimtab raises on purpose."""


class SpecInvalid(TrimtabError):
    """An InferencePool spec (or a scenario, or a pools file) failed validation."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class NotAllowed(SpecInvalid):
    """A valid spec asks for what this installation does not allow (a Prometheus URL or token
    source not on the operator's lists, static endpoints, an envoyFile path outside its
    directory). Unlike a missing Secret it does not heal by itself: the pool is refused until
    its spec (or the operator's flags) change."""


class MetricsError(TrimtabError):
    """Reading a pool's metrics failed."""


class SourceUnavailable(MetricsError):
    """The whole metrics source (Prometheus, or every pod) could not be read this cycle."""


class TargetSyncError(TrimtabError):
    """A target could not publish a decision.

    ``reason`` is a :class:`trimtab.api.reasons.TargetReason` (typed ``str`` here because
    errors sit below the API layer).
    """

    def __init__(self, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class XdsError(TrimtabError):
    """A problem of the built-in xDS server or of the resources it serves."""


class XdsSnapshotInvalid(XdsError):
    """A decision cannot be turned into Envoy resources (e.g. a weight of 0, a hostname in EDS)."""


class XdsConflict(XdsError):
    """Two pools claim the same Envoy cluster name."""


class XdsServerError(XdsError):
    """The xDS gRPC server could not start (e.g. the port is taken)."""


class KubeApiError(TrimtabError):
    """A Kubernetes API call failed; ``status`` is the HTTP status, ``None`` if none came."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class KubeNotFound(KubeApiError):
    """The object (or its namespace) does not exist (HTTP 404)."""


class KubeConflict(KubeApiError):
    """A precondition such as resourceVersion failed, or the object exists (HTTP 409)."""
