"""The InferencePool spec (``trimtab.io/v1alpha1``) as pydantic v2 models.

These models are the single source of truth for the API: the CRD's OpenAPI schema is
generated from them (see :mod:`trimtab.api.crd`), the operator validates every pool with them,
and local mode reads its pools file through them. Field names are camelCase on the wire and
snake_case in Python. Every rule that the CRD cannot express is enforced here, with a message
that names the field and says what is allowed.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from typing import Annotated, Any, Self

from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from trimtab.api.durations import Duration, DurationRange, DurationValue

__all__ = [
    "AdmissionAffinitySpec",
    "AdmissionMode",
    "AdmissionSpec",
    "AffinityMode",
    "AffinitySpec",
    "AppProtocol",
    "CustomMetrics",
    "Engine",
    "EnvoyFileTarget",
    "EnvoyTarget",
    "GatewayAPITarget",
    "HTTPRouteRef",
    "InferencePoolSpec",
    "LabelSelector",
    "LabelSelectorRequirement",
    "MetricsSource",
    "MetricsSpec",
    "PolicySpec",
    "PrefixAffinityMode",
    "PrometheusSpec",
    "RetryOn",
    "RetrySpec",
    "SecretKeyRef",
    "SelectorOperator",
    "StaticEndpoint",
    "Target",
    "TargetPort",
]

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Envoy cluster names are free-form, but keeping them DNS-like avoids quoting surprises in
# stats names and in the generated bootstrap.
_CLUSTER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_METRIC_NAME = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
# A DNS name (IPv4 included) or something IPv6-shaped; pydantic then checks exactly.
_ADDRESS = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*)$"
)

Port = Annotated[int, Field(ge=1, le=65535, description="TCP port, 1..65535.")]
Name = Annotated[str, Field(min_length=1, max_length=63, pattern=_DNS_LABEL)]


class _Model(BaseModel):
    """Base: camelCase aliases on the wire, unknown fields rejected, values immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
    )


class SelectorOperator(enum.StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(_Model):
    """One ``matchExpressions`` entry, as in ``metav1.LabelSelectorRequirement``."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.operator in ['In', 'NotIn']"
                    " ? (has(self.values) && size(self.values) > 0)"
                    " : (!has(self.values) || size(self.values) == 0)",
                    "message": "In/NotIn need values; Exists/DoesNotExist take none",
                }
            ]
        }
    )

    key: str = Field(min_length=1, max_length=317, description="Label key.")
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[Annotated[str, Field(max_length=63, pattern=_LABEL_VALUE)]] = Field(
        default_factory=list,
        description="Values for In/NotIn (at least one); must be empty for Exists/DoesNotExist.",
    )

    @model_validator(mode="after")
    def _values_match_operator(self) -> Self:
        needs_values = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if needs_values and not self.values:
            raise ValueError(f"operator {self.operator.value} needs at least one value in values")
        if not needs_values and self.values:
            raise ValueError(f"operator {self.operator.value} takes no values; remove values")
        return self


class LabelSelector(_Model):
    """Pods of the pool, as in ``metav1.LabelSelector``. An empty selector is refused."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.matchLabels) && size(self.matchLabels) > 0)"
                    " || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",
                    "message": "selector must have matchLabels or matchExpressions",
                }
            ]
        }
    )

    match_labels: dict[str, Annotated[str, Field(max_length=63, pattern=_LABEL_VALUE)]] = Field(
        default_factory=dict, description="Labels a pod must carry, all of them."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, description="Set-based requirements, all of them."
    )

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if not self.match_labels and not self.match_expressions:
            raise ValueError(
                "selector must have matchLabels or matchExpressions; "
                "an empty selector would select every pod in the namespace"
            )
        return self


class StaticEndpoint(_Model):
    """A replica outside Kubernetes (a VM, a docker-compose service)."""

    name: Name = Field(description="Unique name of the replica (a DNS label).")
    address: str = Field(
        min_length=1,
        max_length=253,
        description="IP address or hostname of the replica, without a port.",
        # In the CRD only: the validator below says what is wrong in words.
        json_schema_extra={"pattern": _ADDRESS},
    )
    port: Port

    @field_validator("address")
    @classmethod
    def _address_shape(cls, value: str) -> str:
        if ":" in value and not value.startswith("[") and value.count(":") == 1:
            raise ValueError(
                "address must be an IP address or a hostname without a port: put the port in port"
            )
        if value.startswith("["):
            raise ValueError("address must be an IP address or a hostname, without brackets")
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if not re.fullmatch(_DNS_SUBDOMAIN, value):
                raise ValueError(
                    "address must be an IP address or a hostname (lowercase DNS name)"
                ) from None
        return value


class TargetPort(_Model):
    number: Port


class AppProtocol(enum.StrEnum):
    HTTP = "http"
    """HTTP/1.1 to the replicas: per-pod caps are exact (one request per connection)."""
    H2C = "h2c"
    """HTTP/2 without TLS: caps count connections, not requests (see docs)."""


class Engine(enum.StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    TRTLLM = "trtllm"
    TRITON_TRTLLM = "triton-trtllm"
    CUSTOM = "custom"


class MetricsSource(enum.StrEnum):
    PROMETHEUS = "prometheus"
    DIRECT = "direct"


class SecretKeyRef(_Model):
    """A key in a Secret in the pool's namespace."""

    name: Name = Field(description="Secret name.")
    key: str = Field(min_length=1, max_length=253, description="Key inside the Secret.")


class PrometheusSpec(_Model):
    """Where and how to query Prometheus. The URL must be on the operator's allow-list and a
    token comes only from a source the operator's installer defines (docs/security.md)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.bearerTokenSecretRef) && has(self.tokenSource))",
                    "message": "give bearerTokenSecretRef or tokenSource, not both",
                },
                {
                    "rule": "!self.url.matches('^[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*@')",
                    "message": "url must not hold a user or password; use tokenSource or "
                    "bearerTokenSecretRef",
                },
            ]
        }
    )
    url: AnyHttpUrl = Field(
        description="Base URL of the Prometheus HTTP API, http or https, without user or "
        "password. It must match the operator's --prometheus-url allow-list.",
        json_schema_extra={"pattern": "^https?://"},
    )
    bearer_token_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Bearer token read from a Secret key in the pool's namespace (only when "
        "the operator is installed with Secret access).",
    )
    token_source: Name | None = Field(
        default=None,
        description="Bearer token from a token source the operator's installer defines "
        "(--prometheus-token NAME=FILE), by name.",
    )
    insecure_skip_verify: bool = Field(
        default=False, description="Skip TLS certificate verification (not recommended)."
    )
    timeout: Annotated[Duration, DurationRange(at_least="100ms", at_most="5m")] = Field(
        default=DurationValue("5s"), description="Timeout of one query. Default 5s."
    )
    namespace_label: str = Field(
        default="namespace", pattern=_METRIC_NAME, description="Label holding the pod namespace."
    )
    pod_label: str = Field(
        default="pod", pattern=_METRIC_NAME, description="Label holding the pod name."
    )
    scrape_interval: Annotated[Duration, DurationRange(at_least="1s", at_most="1h")] = Field(
        default=DurationValue("15s"),
        description="How often Prometheus scrapes the pods; sizes the rate() window (4 scrapes).",
    )

    @field_validator("url", mode="before")
    @classmethod
    def _no_userinfo(cls, value: Any) -> Any:
        # Checked on the raw text, before parsing: the message must not quote the password.
        if isinstance(value, str) and re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*@", value):
            raise ValueError(
                "url must not hold a user or password; use tokenSource or bearerTokenSecretRef"
            )
        return value

    @model_validator(mode="after")
    def _one_token_source(self) -> Self:
        if self.bearer_token_secret_ref is not None and self.token_source is not None:
            raise ValueError("give bearerTokenSecretRef or tokenSource, not both")
        return self


class CustomMetrics(_Model):
    """Metric names for ``engine: custom`` (gauges, except ``preemptions`` which is a counter)."""

    running: str = Field(pattern=_METRIC_NAME, description="Gauge of running requests.")
    waiting: str = Field(pattern=_METRIC_NAME, description="Gauge of queued requests.")
    kv_usage: str | None = Field(
        default=None, pattern=_METRIC_NAME, description="Gauge of KV-cache usage, 0..1."
    )
    preemptions: str | None = Field(
        default=None, pattern=_METRIC_NAME, description="Counter of preemptions."
    )


class MetricsSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "duration(self.staleAfter) >= duration(self.interval)",
                    "message": "staleAfter must be at least interval",
                },
                {
                    "rule": "self.source != 'prometheus' || has(self.prometheus)",
                    "message": "source prometheus needs metrics.prometheus with a url",
                },
            ]
        }
    )
    source: MetricsSource = Field(
        default=MetricsSource.DIRECT,
        description="prometheus (PromQL, batched per pool) or direct (scrape each pod).",
    )
    interval: Annotated[Duration, DurationRange(at_least="100ms", at_most="10m")] = Field(
        default=DurationValue("2s"), description="How often to read metrics and decide. >= 100ms."
    )
    stale_after: Annotated[Duration, DurationRange(at_least="100ms", at_most="1h")] = Field(
        default=DurationValue("15s"),
        description="Samples older than this are stale; weights then decay to equal.",
    )
    path: str = Field(
        default="/metrics", pattern=r"^/.*$", description="Path scraped by the direct source."
    )
    port: Port | None = Field(
        default=None, description="Port scraped by the direct source; default: first target port."
    )
    prometheus: PrometheusSpec | None = Field(
        default=None, description="Required when source is prometheus."
    )
    custom: CustomMetrics | None = Field(
        default=None, description="Metric names; required when engine is custom."
    )
    tgi_max_batch_total_tokens: int | None = Field(
        default=None,
        ge=1,
        alias="tgiMaxBatchTotalTokens",
        description="TGI's --max-batch-total-tokens: TGI exports no KV gauge, so KV usage is "
        "tgi_batch_current_max_tokens over this budget; unset: KV usage unknown for TGI.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.stale_after < self.interval:
            raise ValueError(
                f"staleAfter ({self.stale_after.text}) must be at least interval "
                f"({self.interval.text})"
            )
        if self.source is MetricsSource.PROMETHEUS and self.prometheus is None:
            raise ValueError("source prometheus needs metrics.prometheus with a url")
        return self


class AffinityMode(enum.StrEnum):
    NONE = "none"
    RING_HASH = "ringHash"
    MAGLEV = "maglev"


# Envoy's own bounds of a ring (ring_hash.proto: maximum_ring_size at most 8M entries).
_RING_SIZE_LIMIT = 8_388_608


class AffinitySpec(_Model):
    """Session affinity in weights mode: Envoy's consistent hash on a request header.

    The pool's Envoy cluster hashes ``sessionHeader`` onto a ring (or Maglev table) bent by
    trimtab's weights, and bounds each pod's load at ``hashBalanceFactor`` percent of the
    average; docs/envoy.md explains the interplay with the picker and the weights.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.minimumRingSize <= self.maximumRingSize",
                    "message": "minimumRingSize must not exceed maximumRingSize",
                },
            ]
        }
    )

    mode: AffinityMode = Field(
        default=AffinityMode.NONE,
        description="none (weighted least-request), ringHash or maglev on sessionHeader.",
    )
    session_header: str = Field(
        default="x-session-id",
        min_length=1,
        max_length=128,
        pattern=r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$",
        description="Request header whose value keys the hash (lowercase); a request without "
        "it goes to a random pod, within the bound.",
    )
    hash_balance_factor: int = Field(
        default=150,
        ge=100,
        le=10_000,
        description="Bounded load: no pod takes more than this percent of the average "
        "in-flight requests (weighted); a session over it spills to the next pod.",
    )
    minimum_ring_size: int = Field(
        default=1024,
        ge=1,
        le=_RING_SIZE_LIMIT,
        description="ringHash: fewest entries on the ring (Envoy's minimum_ring_size).",
    )
    maximum_ring_size: int = Field(
        default=_RING_SIZE_LIMIT,
        ge=1,
        le=_RING_SIZE_LIMIT,
        description="ringHash: most entries on the ring; every weight push rebuilds it.",
    )

    @model_validator(mode="after")
    def _ring_sizes(self) -> Self:
        if self.minimum_ring_size > self.maximum_ring_size:
            raise ValueError(
                f"minimumRingSize ({self.minimum_ring_size}) must not exceed "
                f"maximumRingSize ({self.maximum_ring_size})"
            )
        return self


class PolicySpec(_Model):
    """Knobs of the balancing policy; docs/policy.md explains each and how it was chosen."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.kvLowWatermark < self.kvHighWatermark",
                    "message": "kvLowWatermark must be below kvHighWatermark",
                },
                {
                    "rule": "self.minInFlightPerPod <= self.maxInFlightPerPod",
                    "message": "minInFlightPerPod must not exceed maxInFlightPerPod",
                },
            ]
        }
    )

    max_in_flight_per_pod: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="Ceiling of every pod's in-flight cap (Envoy max_connections per host). "
        "Keep it above the engine's batch size (vLLM --max-num-seqs).",
    )
    min_in_flight_per_pod: int = Field(
        default=4, ge=1, le=1_000_000, description="Floor of an adaptive cap."
    )
    adaptive_caps: bool = Field(
        default=False, description="Cap each pod at the batch its KV cache sustains."
    )
    cap_headroom: float = Field(
        default=0.25, ge=0, le=10, description="Adaptive caps: slack above the sustainable batch."
    )
    slow_start: Annotated[Duration, DurationRange(at_most="1h")] = Field(
        default=DurationValue("60s"),
        description="Ramp-up time of a newly Ready pod's weight; 0s: off.",
    )
    slow_start_min_fraction: float = Field(
        default=0.1, gt=0, le=1, description="Share of its weight a new pod starts at."
    )
    stale_decay: Annotated[Duration, DurationRange(at_most="1h")] = Field(
        default=DurationValue("10s"),
        description="Time constant of a stale pod's decay to equal weight.",
    )
    kv_low_watermark: float = Field(
        default=0.7, ge=0, lt=1, description="KV usage below which a pod has full weight, 0..1."
    )
    kv_high_watermark: float = Field(
        default=0.9, gt=0, le=1, description="KV usage treated as full (no headroom), 0..1."
    )
    queue_weight: float = Field(
        default=0.0,
        ge=0,
        le=100,
        description="How much each request queued in the engine cuts a pod's weight; 0: off.",
    )
    speed_weight: float = Field(
        default=0.0,
        ge=0,
        le=10,
        description="Exponent of the decode-speed factor: a pod decoding each sequence slower "
        "than the pool's best gets less weight; 0: off.",
    )
    smoothing: Annotated[Duration, DurationRange(at_most="10m")] = Field(
        default=DurationValue("30s"), description="Time constant of weight smoothing; 0s: none."
    )
    min_weight_change: float = Field(
        default=0.05,
        ge=0,
        lt=1,
        description="Hysteresis: weights move only by more than this share of weightScale.",
    )
    weight_scale: int = Field(
        default=1000, ge=1, le=100_000, description="Weight of a pod with full headroom."
    )
    weight_floor: float = Field(
        default=0.02,
        gt=0,
        le=1,
        description="Lowest weight, as a share of weightScale; never 0 for a Ready pod.",
    )
    drain_preemption_rate: float = Field(
        default=1.0, gt=0, description="Preemptions per second at which a pod is drained."
    )
    drain_cap_fraction: float = Field(
        default=0.5, gt=0, le=1, description="A draining pod's cap as a share of its normal cap."
    )
    active_request_bias: float = Field(
        default=4.0,
        ge=0,
        le=10,
        description="Envoy least-request bias while weights differ; 0 follows weights exactly.",
    )
    choice_count: int = Field(
        default=2, ge=2, le=100, description="Hosts Envoy samples per pick (least-request P2C)."
    )
    max_pending_requests: int = Field(
        default=1024,
        ge=1,
        le=100_000_000,
        description="Cluster-wide bound of Envoy's pending queue; overflow is a 503.",
    )
    affinity: AffinitySpec = Field(
        default_factory=AffinitySpec,
        json_schema_extra={"default": {}},
        description="Session affinity by consistent hashing in Envoy; off by default.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.kv_low_watermark >= self.kv_high_watermark:
            raise ValueError(
                f"kvLowWatermark ({self.kv_low_watermark}) must be below "
                f"kvHighWatermark ({self.kv_high_watermark})"
            )
        if self.min_in_flight_per_pod > self.max_in_flight_per_pod:
            raise ValueError(
                f"minInFlightPerPod ({self.min_in_flight_per_pod}) must not exceed "
                f"maxInFlightPerPod ({self.max_in_flight_per_pod})"
            )
        return self


class AdmissionMode(enum.StrEnum):
    OFF = "off"
    PICKER = "picker"


class PrefixAffinityMode(enum.StrEnum):
    OFF = "off"
    PREFIX = "prefix"


class AdmissionAffinitySpec(_Model):
    """Prefix-cache affinity in the picker, under a load guard (docs/picker.md)."""

    mode: PrefixAffinityMode = Field(
        default=PrefixAffinityMode.OFF,
        description="off, or prefix: prefer the pod expected to hold the prompt's prefix "
        "(hashed from the request body) or the x-session-id session, within loadFactor.",
    )
    block_tokens: int = Field(
        default=512,
        ge=16,
        le=65_536,
        description="Tokens per hashed prefix block (a multiple of the engine's KV block).",
    )
    max_prefix_bytes: int = Field(
        default=65_536,
        ge=0,
        le=1_048_576,
        description="Most request-body bytes the picker reads and hashes.",
    )
    load_factor: float = Field(
        default=1.25,
        ge=1,
        le=100,
        description="A cached pod wins only while its load, with the request, stays within "
        "this factor of the least-loaded admissible pod's.",
    )


class AdmissionSpec(_Model):
    """Per-request admission by trimtab's endpoint picker: exact caps and one shared queue.

    Mode picker needs Envoy or a GIE gateway calling the picker over ext_proc; when it does
    not answer, Envoy falls back to the pool's weights.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.mode == 'off'"
                    " || duration(self.retryAfter) <= duration(self.queueTtl)",
                    "message": "retryAfter must not exceed queueTtl",
                },
            ]
        }
    )

    mode: AdmissionMode = Field(
        default=AdmissionMode.OFF, description="off (weights only) or picker (per request)."
    )
    queue_length: int = Field(
        default=1024,
        ge=0,
        le=100_000,
        description="Requests that may wait in the pool's one shared queue; beyond: 429.",
    )
    queue_ttl: Annotated[Duration, DurationRange(at_least="10ms", at_most="10m")] = Field(
        default=DurationValue("30s"),
        description="Longest wait in the queue before a 429 with Retry-After. Keep Envoy's "
        "ext_proc message_timeout above it.",
    )
    kv_limit: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="Admit to a pod only while its estimated KV-cache usage stays below this.",
    )
    expected_output_tokens: int = Field(
        default=256,
        ge=0,
        le=1_000_000,
        description="Output tokens assumed per request when estimating its KV footprint.",
    )
    bytes_per_token: float = Field(
        default=4.0,
        ge=0.5,
        le=64,
        description="Prompt tokens are estimated as request bytes / this, without a "
        "token-count header.",
    )
    priority_classes: int = Field(
        default=1, ge=1, le=16, description="Priority classes (header x-trimtab-priority)."
    )
    kv_capacity_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000_000,
        description="KV-cache size of each pod in tokens, for engines that do not report it "
        "(vLLM and TGI do); unset and unreported: admission by count and cap alone.",
    )
    retry_after: Annotated[Duration, DurationRange(at_least="10ms", at_most="10m")] = Field(
        default=DurationValue("1s"), description="Retry-After sent with a 429."
    )
    affinity: AdmissionAffinitySpec = Field(
        default_factory=AdmissionAffinitySpec, description="Prefix-cache affinity."
    )

    @model_validator(mode="after")
    def _retry_within_ttl(self) -> Self:
        if self.mode is not AdmissionMode.OFF and float(self.retry_after) > float(self.queue_ttl):
            raise ValueError("retryAfter must not exceed queueTtl")
        return self


class RetryOn(enum.StrEnum):
    CONNECT_FAILURE = "connect-failure"
    RESET = "reset"
    REFUSED_STREAM = "refused-stream"
    RESET_BEFORE_REQUEST = "reset-before-request"


class RetrySpec(_Model):
    """Retries at the proxy, bounded by a budget so a saturated fleet is not doubled up."""

    budget_percent: float = Field(
        default=10.0, ge=0, le=100, description="Retries as a percent of active requests."
    )
    min_concurrency: int = Field(
        default=3, ge=0, le=10_000, description="Retries always allowed regardless of budget."
    )
    num_retries: int = Field(default=1, ge=0, le=10, description="Retries per request.")
    retry_on: list[RetryOn] = Field(
        default=[RetryOn.CONNECT_FAILURE, RetryOn.RESET],
        description="Failures that are retried; never timeouts by default.",
    )


class EnvoyTarget(_Model):
    """Served by trimtab's built-in xDS server as a Cluster plus its endpoints."""

    cluster: str = Field(
        min_length=1, max_length=200, pattern=_CLUSTER_NAME, description="Envoy cluster name."
    )


class EnvoyFileTarget(_Model):
    """A ClusterLoadAssignment written to a ConfigMap or a file, for file-based EDS."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.configMap) != has(self.path)",
                    "message": "envoyFile needs exactly one of configMap or path",
                }
            ]
        }
    )

    cluster: str = Field(
        min_length=1, max_length=200, pattern=_CLUSTER_NAME, description="Envoy cluster name."
    )
    config_map: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description="ConfigMap in the pool's namespace.",
    )
    path: str | None = Field(
        default=None, pattern=r"^/.+", description="Absolute file path (sidecar or local mode)."
    )

    @model_validator(mode="after")
    def _one_destination(self) -> Self:
        if (self.config_map is None) == (self.path is None):
            raise ValueError("envoyFile needs exactly one of configMap or path")
        return self


class HTTPRouteRef(_Model):
    """An HTTPRoute (gateway.networking.k8s.io/v1) by name."""

    name: str = Field(
        min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN, description="HTTPRoute name."
    )
    namespace: Name | None = Field(
        default=None,
        description="Namespace of the HTTPRoute; default: the pool's. A route in another "
        "namespace needs a ReferenceGrant in the pool's namespace (from HTTPRoute to Service).",
    )


class GatewayAPITarget(_Model):
    """One rule of a Gateway API HTTPRoute, whose backendRefs trimtab writes as weight tiers.

    The pool's pods are grouped into at most ``tiers`` tiers of similar weight (one per pod
    while the pool has no more pods than tiers); each tier is a selector-less Service plus an
    EndpointSlice owned by the pool, and the rule's backendRefs weigh them. Only that rule's
    backendRefs are written; the rest of the route is left as it is.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.ruleName) && has(self.ruleIndex))",
                    "message": "give ruleName or ruleIndex, not both",
                }
            ]
        }
    )

    http_route: HTTPRouteRef = Field(alias="httpRoute", description="The HTTPRoute to write.")
    rule_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description="The rule, by its name (spec.rules[].name). Exclusive with ruleIndex.",
    )
    rule_index: int | None = Field(
        default=None,
        ge=0,
        le=15,
        description="The rule, by its position in spec.rules (0..15). Default: 0 when neither "
        "ruleName nor ruleIndex is given.",
    )
    tiers: int = Field(
        default=16,
        ge=1,
        le=16,
        description="Most backends (weight tiers) trimtab keeps in the rule, 1..16 (an HTTPRoute "
        "rule takes at most 16 backendRefs).",
    )

    @model_validator(mode="after")
    def _one_rule(self) -> Self:
        if self.rule_name is not None and self.rule_index is not None:
            raise ValueError("give ruleName or ruleIndex, not both")
        return self


class Target(_Model):
    """Where decisions go: exactly one of envoy, envoyFile or gatewayAPI per entry."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.envoy), has(self.envoyFile), has(self.gatewayAPI)]"
                    ".filter(x, x).size() == 1",
                    "message": "each target needs exactly one of envoy, envoyFile or gatewayAPI",
                }
            ]
        }
    )

    envoy: EnvoyTarget | None = None
    envoy_file: EnvoyFileTarget | None = None
    gateway_api: GatewayAPITarget | None = Field(default=None, alias="gatewayAPI")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = [v for v in (self.envoy, self.envoy_file, self.gateway_api) if v is not None]
        if len(given) != 1:
            raise ValueError("each target needs exactly one of envoy, envoyFile or gatewayAPI")
        return self


_UNIQUE_CLUSTERS = (
    "(self.targets.filter(t, has(t.envoy)).map(t, t.envoy.cluster)"
    " + self.targets.filter(t, has(t.envoyFile)).map(t, t.envoyFile.cluster))"
    ".all(c, self.targets.filter(t, has(t.envoy) && t.envoy.cluster == c).size()"
    " + self.targets.filter(t, has(t.envoyFile) && t.envoyFile.cluster == c).size() == 1)"
)


class InferencePoolSpec(_Model):
    """Desired state of an InferencePool: its members, metrics, policy, retries and targets."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.selector) != has(self.endpoints)",
                    "message": "give exactly one of selector (pods) or endpoints (static replicas)",
                },
                {
                    "rule": "self.engine != 'custom'"
                    " || (has(self.metrics) && has(self.metrics.custom))",
                    "message": "engine custom needs metrics.custom with the metric names",
                },
                {
                    "rule": _UNIQUE_CLUSTERS,
                    "message": "envoy cluster names must be unique within a pool",
                },
            ]
        }
    )

    selector: LabelSelector | None = Field(
        default=None, description="Pods of the pool (in its namespace). Exclusive with endpoints."
    )
    endpoints: list[StaticEndpoint] | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="Static replicas outside Kubernetes. Exclusive with selector.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    target_ports: list[TargetPort] = Field(
        default=[TargetPort(number=8000)],
        min_length=1,
        max_length=8,
        description="Serving port(s) of the pods. Default [8000].",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["number"],
        },
    )
    app_protocol: AppProtocol = Field(
        default=AppProtocol.HTTP, description="Protocol to the replicas: http or h2c."
    )
    engine: Engine = Field(
        default=Engine.VLLM,
        description="Serving engine, which sets the metric names; custom needs metrics.custom.",
    )
    metrics: MetricsSpec = Field(default_factory=MetricsSpec, json_schema_extra={"default": {}})
    policy: PolicySpec = Field(default_factory=PolicySpec, json_schema_extra={"default": {}})
    retry: RetrySpec = Field(default_factory=RetrySpec, json_schema_extra={"default": {}})
    admission: AdmissionSpec = Field(
        default_factory=AdmissionSpec, json_schema_extra={"default": {}}
    )
    targets: list[Target] = Field(
        min_length=1, max_length=16, description="Where decisions go; at least one."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.selector is None) == (self.endpoints is None):
            raise ValueError("give exactly one of selector (pods) or endpoints (static replicas)")
        if self.endpoints is not None:
            names = [e.name for e in self.endpoints]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"endpoints names must be unique; repeated: {duplicates}")
            places = [f"{e.address}:{e.port}" for e in self.endpoints]
            twice = sorted({p for p in places if places.count(p) > 1})
            if twice:
                raise ValueError(
                    f"endpoints must not repeat an address and port; repeated: {twice}"
                )
        if self.engine is Engine.CUSTOM and self.metrics.custom is None:
            raise ValueError("engine custom needs metrics.custom with the metric names")
        ports = [p.number for p in self.target_ports]
        if len(set(ports)) != len(ports):
            raise ValueError(f"targetPorts must be unique; got {ports}")
        clusters = [t.envoy.cluster for t in self.targets if t.envoy] + [
            t.envoy_file.cluster for t in self.targets if t.envoy_file
        ]
        if len(set(clusters)) != len(clusters):
            raise ValueError(f"envoy cluster names must be unique within a pool; got {clusters}")
        return self

    def to_wire(self) -> dict[str, Any]:
        """The spec as it appears in the Kubernetes object (camelCase, no nulls)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
