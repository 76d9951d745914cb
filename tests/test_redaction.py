"""The one sanitiser: secrets, userinfo and control characters out, one capped line."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trimtab.redaction import MAX_MESSAGE_CHARS, REDACTED, sanitize, strip_userinfo


def test_secrets_userinfo_and_controls_go() -> None:
    text = "GET http://admin:hunter2@prom:9090/api failed: Bearer tok-123456\nforged: line\x1b[31m"
    found = sanitize(text, secrets=["tok-123456"])
    assert "hunter2" not in found and "admin" not in found
    assert "tok-123456" not in found and REDACTED in found
    assert "\n" not in found and "\x1b" not in found
    assert "http://prom:9090/api" in found


def test_a_long_text_is_capped() -> None:
    assert len(sanitize("x" * 10_000)) == MAX_MESSAGE_CHARS


def test_short_secrets_do_not_redact_words() -> None:
    assert sanitize("a b c", secrets=["a", None]) == "a b c"


def test_userinfo_without_password_goes_too() -> None:
    assert (
        strip_userinfo("see https://user@host/x and ftp://u:p@h")
        == "see https://host/x and ftp://h"
    )


@given(prefix=st.text(), suffix=st.text(), secret=st.text(min_size=4).filter(str.isprintable))
def test_no_secret_survives(prefix: str, suffix: str, secret: str) -> None:
    found = sanitize(prefix + secret + suffix, secrets=[secret], limit=10_000)
    assert secret not in found or secret in REDACTED
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in found)
