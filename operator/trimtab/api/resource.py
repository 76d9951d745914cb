"""The InferencePool resource: group, version, names, and the whole-object model."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trimtab.api.spec import InferencePoolSpec
from trimtab.api.status import InferencePoolStatus

__all__ = [
    "API_VERSION",
    "CATEGORIES",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "InferencePool",
    "ObjectMeta",
]

GROUP = "trimtab.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferencePool"
PLURAL = "inferencepools"
SINGULAR = "inferencepool"
SHORT_NAMES = ["ipool"]
CATEGORIES = ["trimtab", "inference"]
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class ObjectMeta(BaseModel):
    """The part of ``metadata`` that trimtab reads; the rest is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN)
    namespace: str = Field(default="default", min_length=1, max_length=63, pattern=_DNS_LABEL)
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class InferencePool(BaseModel):
    """A whole InferencePool object, as in a manifest or the pools file of local mode."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: str = Field(alias="apiVersion", pattern=f"^{API_VERSION}$")
    kind: str = Field(pattern=f"^{KIND}$")
    metadata: ObjectMeta
    spec: InferencePoolSpec
    status: InferencePoolStatus | None = None

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
