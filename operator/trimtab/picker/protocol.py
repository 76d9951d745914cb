"""The endpoint-picker (EPP) protocol's names and messages, as ext_proc protobufs.

Names verified in the Gateway API Inference Extension: the proposal
``docs/proposals/004-endpoint-picker-protocol/README.md`` and the reference constants
``pkg/lwepp/metadata/consts.go``. The subset hint may arrive as a list of strings (control
planes writing JSON lists) or as one comma-separated string (``header_to_metadata`` rules);
an entry without a port allows every port of that IP, as the reference picker reads it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

__all__ = [
    "BODY_MODE",
    "DESTINATION_HEADER",
    "DESTINATION_NAMESPACE",
    "POOL_HEADER",
    "PRIORITY_HEADER",
    "PROMPT_TOKENS_HEADER",
    "SERVED_KEY",
    "SESSION_HEADER",
    "SUBSET_KEY",
    "SUBSET_NAMESPACE",
    "RequestHead",
    "continue_request",
    "continue_response",
    "destination",
    "immediate",
    "parse_request_head",
    "request_body_wanted",
    "served_endpoint",
    "subset_hint",
]

DESTINATION_HEADER = "x-gateway-destination-endpoint"
DESTINATION_NAMESPACE = "envoy.lb"
SERVED_KEY = "x-gateway-destination-endpoint-served"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
POOL_HEADER = "x-trimtab-pool"
"""Names the pool: gRPC metadata set per route by the bootstrap, else this request header."""
PRIORITY_HEADER = "x-trimtab-priority"
PROMPT_TOKENS_HEADER = "x-trimtab-prompt-tokens"
SESSION_HEADER = "x-session-id"

BODY_MODE: dict[str, str] = {
    "request_header_mode": "SEND",
    "response_header_mode": "SEND",
    "request_body_mode": "BUFFERED_PARTIAL",
    "response_body_mode": "NONE",
    "request_trailer_mode": "SKIP",
    "response_trailer_mode": "SEND",
}
"""The processing mode the picker switches a request to when it wants its body (prefix
affinity): the bootstrap's mode with the request body buffered, up to Envoy's buffer limit. The
bootstrap allows exactly this override (``allowed_override_modes``)."""

_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestHead:
    """What the picker reads from one request's headers."""

    pool: str | None
    prompt_tokens: int | None
    content_length: int | None
    priority: int
    session: str | None = None
    has_body: bool = True
    """False when the headers end the request (Envoy sends no body then)."""


def parse_request_head(headers: Any) -> RequestHead:
    """The pool, size and priority of a request from its ext_proc ``HttpHeaders``."""
    values = _header_values(headers)
    return RequestHead(
        pool=values.get(POOL_HEADER) or None,
        prompt_tokens=_non_negative(values.get(PROMPT_TOKENS_HEADER)),
        content_length=_non_negative(values.get("content-length")),
        priority=_non_negative(values.get(PRIORITY_HEADER)) or 0,
        session=values.get(SESSION_HEADER) or None,
        has_body=not headers.end_of_stream,
    )


def subset_hint(metadata: Any) -> tuple[str, ...] | None:
    """The subset hint of a request's ``metadata_context``; None when the key is absent.

    An empty tuple means the data plane set the key with no endpoint: nothing may be picked.
    """
    namespace = metadata.filter_metadata.get(SUBSET_NAMESPACE)
    if namespace is None or SUBSET_KEY not in namespace.fields:
        return None
    value = namespace.fields[SUBSET_KEY]
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        raw: list[str] = [value.string_value]
    elif kind == "list_value":
        raw = [v.string_value for v in value.list_value.values if v.HasField("string_value")]
    else:
        raw = []
    return tuple(entry.strip() for item in raw for entry in item.split(",") if entry.strip())


def served_endpoint(metadata: Any, headers: Any) -> str | None:
    """Where Envoy sent the request: ``envoy.lb`` metadata as EPP says, else the response header."""
    namespace = metadata.filter_metadata.get(DESTINATION_NAMESPACE)
    if namespace is not None and SERVED_KEY in namespace.fields:
        value = namespace.fields[SERVED_KEY]
        if value.WhichOneof("kind") == "string_value" and value.string_value:
            return str(value.string_value)
    return _header_values(headers).get(SERVED_KEY) or None


def expand_subset(hint: Iterable[str], addresses: Iterable[str]) -> frozenset[str]:
    """The pod addresses (``ip:port``) a hint allows; a bare IP allows all its ports."""
    entries = set(hint)
    return frozenset(
        address
        for address in addresses
        if address in entries or address.rpartition(":")[0].strip("[]") in entries
    )


def destination(*, address: str, fallbacks: Sequence[str], phase: str = "request_headers") -> Any:
    """The answer naming the endpoint: header and ``envoy.lb`` metadata, same value.

    ``phase`` is the message answered: ``request_headers``, or ``request_body`` when the pick
    waited for the body (Envoy holds the headers while it buffers the body, so they can still
    be changed).
    """
    value = ",".join((address, *fallbacks))
    mutation = ext_proc.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=DESTINATION_HEADER, raw_value=value.encode()),
                append_action=_OVERWRITE,
            )
        ]
    )
    metadata = struct_pb2.Struct()
    metadata.update({DESTINATION_NAMESPACE: {DESTINATION_HEADER: value}})
    common = ext_proc.CommonResponse(header_mutation=mutation)
    if phase == "request_body":
        return ext_proc.ProcessingResponse(
            request_body=ext_proc.BodyResponse(response=common), dynamic_metadata=metadata
        )
    return ext_proc.ProcessingResponse(
        request_headers=ext_proc.HeadersResponse(response=common), dynamic_metadata=metadata
    )


def request_body_wanted() -> Any:
    """Request headers answer asking Envoy for the request body before the pick."""
    mode = processing_mode_pb2.ProcessingMode(
        **{
            key: getattr(processing_mode_pb2.ProcessingMode, value)
            for key, value in BODY_MODE.items()
        }
    )
    return ext_proc.ProcessingResponse(
        request_headers=ext_proc.HeadersResponse(), mode_override=mode
    )


def continue_request() -> Any:
    """Request headers answer that leaves the choice to Envoy's fallback policy (the weights)."""
    return ext_proc.ProcessingResponse(request_headers=ext_proc.HeadersResponse())


def continue_response(*, kind: str, remove: Sequence[str] = ()) -> Any:
    """An unchanged answer to a response phase (``response_headers``, ``response_trailers``...)."""
    if kind == "response_headers":
        mutation = ext_proc.HeaderMutation(remove_headers=list(remove))
        return ext_proc.ProcessingResponse(
            response_headers=ext_proc.HeadersResponse(
                response=ext_proc.CommonResponse(header_mutation=mutation)
            )
        )
    if kind == "request_headers":
        return continue_request()
    if kind in ("request_body", "response_body"):
        return ext_proc.ProcessingResponse(**{kind: ext_proc.BodyResponse()})
    return ext_proc.ProcessingResponse(**{kind: ext_proc.TrailersResponse()})


def immediate(*, status: int, reason: str, retry_after_s: float | None) -> Any:
    """The picker's own answer instead of the upstream's (503 no endpoint, 429 shed)."""
    headers = [("x-trimtab-refusal", reason)]
    if retry_after_s is not None:
        # Retry-After takes whole seconds; rounding up never invites a too-early retry.
        headers.append(("retry-after", str(max(1, math.ceil(retry_after_s)))))
    mutation = ext_proc.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=key, raw_value=value.encode()),
                append_action=_OVERWRITE,
            )
            for key, value in headers
        ]
    )
    return ext_proc.ProcessingResponse(
        immediate_response=ext_proc.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=status),
            headers=mutation,
            body=f"{reason}\n".encode(),
            details=f"trimtab_picker_{reason}",
        )
    )


def _header_values(headers: Any) -> Mapping[str, str]:
    found: dict[str, str] = {}
    for header in headers.headers.headers:
        found.setdefault(header.key.lower(), header.raw_value.decode("latin-1") or header.value)
    return found


def _non_negative(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value >= 0 else None
