"""Kubernetes-style durations ("500ms", "2s", "1m30s") as a pydantic type.

The CRD stores durations as strings, the way Kubernetes users write them; the code works in
seconds. :data:`Duration` validates the string, keeps it for serialisation (so a round trip
prints what the user wrote) and exposes the seconds through :func:`seconds`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

__all__ = [
    "DURATION_PATTERN",
    "LONGEST",
    "Duration",
    "DurationRange",
    "DurationValue",
    "format_duration",
    "parse_duration",
]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
DURATION_PATTERN = r"^(\d+(\.\d+)?(ms|s|m|h))+$"
_WHOLE = re.compile(DURATION_PATTERN)
LONGEST = 7 * 24 * 3600.0
"""No duration in trimtab's API means more than a week; larger ones are typos or attacks."""


_SHOWN = 32
"""Characters of a refused duration quoted back: a megabyte of input must not become a
megabyte of status message, event and log line."""
LONGEST_TEXT = 64
"""No real duration is longer ("1h59m59s999ms" is 13); a longer one ("1ms" x 300,000 is valid
syntax) would be stored and quoted back in every status."""


def parse_duration(text: str) -> float:
    """Seconds in a Kubernetes/Go-style duration such as ``"1m30s"`` or ``"500ms"``."""
    if len(text) > LONGEST_TEXT:
        raise ValueError(
            f"duration {_shown(text)} is longer than {LONGEST_TEXT} characters; write e.g. 1m30s"
        )
    if not _WHOLE.match(text):
        raise ValueError(
            f"invalid duration {_shown(text)}: use a number with a unit ms, s, m or h, "
            "e.g. 500ms, 2s, 1m"
        )
    seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(text))
    if not seconds <= LONGEST:
        raise ValueError(f"duration {_shown(text)} is longer than a week")
    return seconds


def _shown(text: str) -> str:
    return repr(text) if len(text) <= _SHOWN else f"{text[:_SHOWN]!r}... ({len(text)} characters)"


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of ``seconds`` in whole ms, s, m or h."""
    millis = round(seconds * 1000)
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis and millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"


class DurationValue(float):
    """Seconds as a float that remembers how the user spelled it."""

    text: str

    def __new__(cls, text: str) -> DurationValue:
        value = super().__new__(cls, parse_duration(text))
        value.text = text
        return value

    def __repr__(self) -> str:
        return f"Duration({self.text!r})"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def validate(raw: Any) -> DurationValue:
            if isinstance(raw, DurationValue):
                return raw
            if isinstance(raw, bool) or not isinstance(raw, str | int | float):
                raise PydanticCustomError(
                    "duration_type", "a duration must be a string such as 500ms, 2s or 1m"
                )
            if isinstance(raw, int | float):
                if raw < 0:
                    raise PydanticCustomError("duration_negative", "a duration cannot be negative")
                if not raw <= LONGEST:  # also refuses NaN and infinity
                    raise PydanticCustomError("duration_long", "a duration is at most a week")
                return cls(format_duration(float(raw)))
            try:
                return cls(raw)
            except ValueError as exc:
                raise PydanticCustomError("duration_format", str(exc)) from None

        return core_schema.no_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda value: value.text, when_used="always"
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "pattern": DURATION_PATTERN, "maxLength": LONGEST_TEXT}


Duration = Annotated[DurationValue, "duration"]


class DurationRange:
    """Bounds of one Duration field, enforced by pydantic and stated as CRD CEL rules.

    Used as ``Annotated[DurationValue, DurationRange(at_least="100ms", at_most="10m")]`` so the
    range is written once and the API server refuses exactly what the operator refuses.
    """

    def __init__(self, *, at_least: str | None = None, at_most: str | None = None) -> None:
        self.at_least = at_least
        self.at_most = at_most
        self._low = parse_duration(at_least) if at_least else None
        self._high = parse_duration(at_most) if at_most else None

    def _message(self) -> str:
        if self.at_least and self.at_most:
            return f"must be between {self.at_least} and {self.at_most}"
        if self.at_least:
            return f"must be at least {self.at_least}"
        return f"must be at most {self.at_most}"

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def check(value: DurationValue) -> DurationValue:
            if (self._low is not None and value < self._low) or (
                self._high is not None and value > self._high
            ):
                raise PydanticCustomError("duration_range", f"{value.text} {self._message()}")
            return value

        return core_schema.no_info_after_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        found = dict(handler(schema))
        parts = []
        if self.at_least:
            parts.append(f"duration(self) >= duration('{self.at_least}')")
        if self.at_most:
            parts.append(f"duration(self) <= duration('{self.at_most}')")
        found["x-kubernetes-validations"] = [
            {"rule": " && ".join(parts), "message": self._message()}
        ]
        return found
