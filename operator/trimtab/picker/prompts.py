"""The prompt prefix of an OpenAI-style request body, as chained block hashes.

Hashed the way trimtab's replica emulator hashes what its modelled cache holds, so the same
prompt names the same blocks on both sides: a chat is its messages' roles and contents in order
(``role\\ncontent\\n`` each, text parts of a content list joined), so each turn extends the
previous turn's prefix; a completion is its ``prompt`` (the first one of a list); a prompt of
token ids is hashed in blocks of ids. Characters stand in for tokens at ``chars_per_token``.

Only the first ``max_bytes`` characters count: a router needs the head of a prompt, and hashing
stays bounded however long the prompt. A body that is not JSON (or was cut short by Envoy's
buffer limit, above which ``BUFFERED_PARTIAL`` sends only the first part) has no prefix.
"""

from __future__ import annotations

import json
from typing import Any

from trimtab.admission.prefix import chain_hashes, prompt_block_hashes

__all__ = ["prompt_prefix"]


def prompt_prefix(
    *, body: bytes, block_tokens: int, chars_per_token: int, max_bytes: int
) -> tuple[int, ...]:
    """Block hashes of the body's prompt head; empty when the body names no prompt."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return ()
    if not isinstance(data, dict):
        return ()
    messages = data.get("messages")
    if isinstance(messages, list):
        text = _chat_text(messages, limit=max_bytes)
    else:
        prompt = data.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            return _token_blocks(prompt, block_tokens=block_tokens, limit=max_bytes)
        if isinstance(prompt, list) and prompt:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            return ()
        text = prompt[:max_bytes]
    return prompt_block_hashes(
        text=text, block_tokens=block_tokens, chars_per_token=chars_per_token
    )


def _chat_text(messages: list[Any], *, limit: int) -> str:
    parts: list[str] = []
    size = 0
    for message in messages:
        if not isinstance(message, dict):
            break
        part = f"{message.get('role', '')}\n{_content(message.get('content', ''))}\n"
        parts.append(part)
        size += len(part)
        if size >= limit:
            break
    return "".join(parts)[:limit]


def _content(content: object) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _token_blocks(prompt: list[Any], *, block_tokens: int, limit: int) -> tuple[int, ...]:
    # A token id is a few characters of the body; the limit bounds the ids hashed the same way.
    ids = prompt[: max(0, limit // 4)]
    blocks = len(ids) // block_tokens
    return chain_hashes(
        ",".join(map(str, ids[index * block_tokens : (index + 1) * block_tokens])).encode()
        for index in range(blocks)
    )
