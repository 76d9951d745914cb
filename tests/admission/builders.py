"""Builders shared by the admission tests: pods named ``pod-N`` at ``10.0.0.N:8000``."""

from __future__ import annotations

from typing import Any

from trimtab.admission import (
    Admission,
    AdmissionSettings,
    Ask,
    Grant,
    PodCapacity,
    Queued,
    Refusal,
    RequestId,
)
from trimtab.api.records import PodName


def address(n: int) -> str:
    return f"10.0.0.{n}:8000"


def pod(n: int, *, cap: int = 4, **fields: Any) -> PodCapacity:
    return PodCapacity(name=PodName(f"pod-{n}"), address=address(n), cap=cap, **fields)


def ask(id: str, *, tokens: int = 100, **fields: Any) -> Ask:
    return Ask(id=RequestId(id), prompt_tokens=tokens, **fields)


def admission(*pods: PodCapacity, now: float = 0.0, **settings: Any) -> Admission:
    built = Admission(settings=AdmissionSettings(**settings))
    assert built.set_pods(pods=pods, now=now) == []
    return built


def granted(answer: Grant | Queued | Refusal) -> Grant:
    assert isinstance(answer, Grant), answer
    return answer


def in_flight(admitted: Admission) -> dict[str, int]:
    return {p.name: p.in_flight for p in admitted.stats().pods}
