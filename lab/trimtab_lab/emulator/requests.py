"""Validate OpenAI-style completion requests and size them in tokens.

There is no tokenizer: a prompt costs one token per ~4 characters, as OpenAI's rule of thumb
says. Load generators that want exact sizes without sending huge prompts may add the extension
field ``"prompt_tokens": <int>`` to the body, which then wins over the text (and makes
``prompt`` optional in ``/v1/completions``). The output is
always exactly ``max_tokens`` long (the emulator has no end-of-sequence token); without
``max_tokens`` it is 16, OpenAI's default for completions. One choice per request: ``n`` other
than 1 is refused with a 400 rather than silently answered with one choice.

With prefix caching on, the prompt is hashed into blocks of ``prefix_block_tokens`` tokens
(:func:`trimtab.admission.prefix.prompt_block_hashes`, 4 characters a token; a list of token ids
in blocks of ids), so requests that share a leading text share leading block hashes. A chat is
hashed as its messages' roles and contents in order, so each turn of a conversation extends the
previous turn's prefix.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from trimtab.admission.prefix import chain_hashes, prompt_block_hashes

__all__ = ["CHARS_PER_TOKEN", "Completion", "Kind", "RequestError", "parse_completion"]

CHARS_PER_TOKEN = 4
_DEFAULT_MAX_TOKENS = 16


class Kind(enum.Enum):
    COMPLETION = enum.auto()
    """``POST /v1/completions``: ``prompt`` in, ``choices[].text`` out."""
    CHAT = enum.auto()
    """``POST /v1/chat/completions``: ``messages`` in, ``choices[].message``/``delta`` out."""


@dataclass(frozen=True, kw_only=True)
class Completion:
    """A valid request, reduced to what the replica model needs."""

    kind: Kind
    model: str
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool = False
    """``stream_options.include_usage``: a last chunk with token counts."""
    block_hashes: tuple[int, ...] = ()
    """Chained hashes of the prompt's full blocks; empty without prefix caching."""


class RequestError(Exception):
    """A request the emulator refuses, rendered as an OpenAI error body."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def parse_completion(
    *, kind: Kind, body: Any, models: tuple[str, ...], prefix_block_tokens: int | None = None
) -> Completion:
    """Check ``body`` (decoded JSON) the way an OpenAI-compatible server would.

    ``prefix_block_tokens`` (prefix caching on): also hash the prompt into blocks that size.
    """
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("model is required and must be a string", param="model")
    if model not in models:
        raise RequestError(
            f"The model `{model}` does not exist.",
            status=404,
            param="model",
            code="model_not_found",
        )
    declared = _positive_int(body, "prompt_tokens")
    if declared is not None and kind is Kind.COMPLETION and body.get("prompt") is None:
        text_chars = 0
    else:
        text_chars = _prompt_chars(body) if kind is Kind.COMPLETION else _chat_chars(body)
    max_tokens = _positive_int(body, "max_tokens")
    if kind is Kind.CHAT:
        # The newer name wins, as in OpenAI's API.
        max_tokens = _positive_int(body, "max_completion_tokens") or max_tokens
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        raise RequestError(f"n={n!r} is not supported: the emulator returns one choice", param="n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("stream must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object", param="stream_options")
    return Completion(
        kind=kind,
        model=model,
        prompt_tokens=declared or max(1, math.ceil(text_chars / CHARS_PER_TOKEN)),
        max_tokens=max_tokens or _DEFAULT_MAX_TOKENS,
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        block_hashes=(
            _block_hashes(kind=kind, body=body, block_tokens=prefix_block_tokens)
            if prefix_block_tokens is not None
            else ()
        ),
    )


def _block_hashes(*, kind: Kind, body: dict[str, Any], block_tokens: int) -> tuple[int, ...]:
    """Hashes of a validated body's prompt (see the module docstring)."""
    if kind is Kind.CHAT:
        text = "".join(
            f"{message['role']}\n{_content(message.get('content', ''))}\n"
            for message in body["messages"]
        )
        return prompt_block_hashes(
            text=text, block_tokens=block_tokens, chars_per_token=CHARS_PER_TOKEN
        )
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        blocks = len(prompt) // block_tokens
        return chain_hashes(
            ",".join(map(str, prompt[i * block_tokens : (i + 1) * block_tokens])).encode()
            for i in range(blocks)
        )
    if isinstance(prompt, list):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        return ()
    return prompt_block_hashes(
        text=prompt, block_tokens=block_tokens, chars_per_token=CHARS_PER_TOKEN
    )


def _content(content: object) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _positive_int(body: dict[str, Any], key: str) -> int | None:
    if body.get(key) is None:
        return None
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(f"{key} must be a positive integer, got {value!r}", param=key)
    return value


def _prompt_chars(body: dict[str, Any]) -> int:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        if len(prompt) > 1:
            raise RequestError("only one prompt per request is supported", param="prompt")
        return len(prompt[0])
    if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        # A list of token ids: each is one token.
        return len(prompt) * CHARS_PER_TOKEN
    raise RequestError("prompt is required: a string or a list of token ids", param="prompt")


def _chat_chars(body: dict[str, Any]) -> int:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    total = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(f"messages[{index}] needs a role", param="messages")
        content = message.get("content", "")
        if isinstance(content, list):
            # Content parts: count the text ones.
            content = "".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        if not isinstance(content, str):
            raise RequestError(f"messages[{index}].content must be text", param="messages")
        total += len(content)
    return total
