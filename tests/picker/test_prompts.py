"""The picker hashes a request body's prompt exactly as the lab's emulator hashes its cache."""

from __future__ import annotations

import json

import pytest

from trimtab.admission import AffinityMode, settings_from_spec
from trimtab.api.spec import AdmissionSpec
from trimtab.picker.prompts import prompt_prefix
from trimtab_lab.emulator.requests import Kind, parse_completion

SYSTEM = "Answer from the documents below and nothing else. " * 60


def _hashes(body: dict[str, object], *, max_bytes: int = 65536) -> tuple[int, ...]:
    return prompt_prefix(
        body=json.dumps(body).encode(), block_tokens=16, chars_per_token=4, max_bytes=max_bytes
    )


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (
            Kind.CHAT,
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": [{"type": "text", "text": "Which one?"}]},
                ],
            },
        ),
        (Kind.COMPLETION, {"model": "m", "prompt": SYSTEM + "Which one?"}),
        (Kind.COMPLETION, {"model": "m", "prompt": [SYSTEM]}),
        (Kind.COMPLETION, {"model": "m", "prompt": list(range(100))}),
    ],
)
def test_same_blocks_as_the_emulator(kind: Kind, body: dict[str, object]) -> None:
    emulated = parse_completion(kind=kind, body=body, models=("m",), prefix_block_tokens=16)
    assert emulated.block_hashes
    assert _hashes(body) == emulated.block_hashes


def test_a_chat_turn_extends_the_previous_turn() -> None:
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "q1 " * 30}]
    second = [
        *first,
        {"role": "assistant", "content": "a1 " * 30},
        {"role": "user", "content": "q2"},
    ]
    one, two = _hashes({"messages": first}), _hashes({"messages": second})
    assert two[: len(one) - 1] == one[:-1]
    assert len(two) > len(one)


def test_only_the_head_is_hashed() -> None:
    full = _hashes({"prompt": SYSTEM})
    head = _hashes({"prompt": SYSTEM}, max_bytes=640)
    assert head == full[:10]


@pytest.mark.parametrize(
    "body", [b"", b"not json", b'{"messages": [{"role": "user", "content": "cut sho', b"[1, 2]"]
)
def test_no_prompt_no_prefix(body: bytes) -> None:
    assert prompt_prefix(body=body, block_tokens=16, chars_per_token=4, max_bytes=65536) == ()


def test_spec_maps_to_settings() -> None:
    spec = AdmissionSpec.model_validate(
        {
            "mode": "picker",
            "affinity": {
                "mode": "prefix",
                "blockTokens": 256,
                "maxPrefixBytes": 4096,
                "loadFactor": 1.5,
            },
        }
    )
    settings = settings_from_spec(admission=spec, stale_after_s=15.0)
    assert settings.affinity is AffinityMode.PREFIX
    assert settings.affinity_block_tokens == 256
    assert settings.affinity_max_prefix_bytes == 4096
    assert settings.affinity_load_factor == 1.5
    default = settings_from_spec(admission=AdmissionSpec(), stale_after_s=15.0)
    assert default.affinity is AffinityMode.OFF
