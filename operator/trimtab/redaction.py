"""The one sanitiser for text that may reach a pool's status, an event or a log line.

Such text is often built from what someone else controls: an upstream error body, an
exception message quoting a header, a URL with ``user:password@`` in it. :func:`sanitize`
removes the secrets it is told about, the userinfo of any URL, and control characters (a
newline would forge a log line), and caps the result, so a message is always one short line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MAX_MESSAGE_CHARS", "REDACTED", "sanitize", "strip_userinfo"]

MAX_MESSAGE_CHARS = 256
REDACTED = "[redacted]"

# scheme://userinfo@ — the userinfo ends at the first "/", "?", "#" or whitespace.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#\s@]*@")
# C0, DEL and C1 controls, and the Unicode line and paragraph separators.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# Shorter secrets would redact ordinary words; tokens are never this short.
_MIN_SECRET_CHARS = 4


def strip_userinfo(text: str) -> str:
    """``text`` with ``user:password@`` removed from every URL in it."""
    return _USERINFO.sub(r"\1", text)


def sanitize(
    text: object, *, secrets: Iterable[str | None] = (), limit: int = MAX_MESSAGE_CHARS
) -> str:
    """``text`` as one line of at most ``limit`` characters with no secret in it.

    Secrets are removed before the control characters are (a secret may hold none, the text
    around it may) and again after, then the line is capped.
    """
    found = str(text)
    wanted = sorted(
        {s for s in secrets if s is not None and len(s) >= _MIN_SECRET_CHARS}, key=len, reverse=True
    )
    for secret in wanted:
        found = found.replace(secret, REDACTED)
    found = _CONTROL.sub(" ", strip_userinfo(found)).strip()
    for secret in wanted:
        found = found.replace(secret, REDACTED)
    if len(found) > limit:
        found = found[: max(0, limit - 1)] + "…"
    return found
