"""Kubernetes' RFC 3339 timestamps, written and read in one place."""

from __future__ import annotations

import datetime

__all__ = ["parse_time", "rfc3339"]


def rfc3339(moment: datetime.datetime) -> str:
    """Kubernetes' time format: UTC, whole seconds, ``Z`` suffix."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime.datetime | None:
    """A Kubernetes RFC 3339 timestamp as an aware datetime; ``None`` when absent or invalid."""
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)
