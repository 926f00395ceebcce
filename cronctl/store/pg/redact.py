"""Passwords out of every text cronctl shows: URLs, conninfo strings and libpq's error messages.

SPEC §9: the password never appears in any output, audit row or error message. Every
text that may carry a store URL or a driver's error passes through `redact` before it
is shown, logged or raised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, unquote

MASK = "***"

# scheme://user:PASSWORD@host: the password runs to the last `@` of the authority, so a
# raw `@` inside it (which libpq would misread anyway) does not leave half of it shown.
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^:/?#@\s]*:)(?P<secret>[^/?#\s]*)(?=@)", re.IGNORECASE)
# password=... as a conninfo key (quoted or not: libpq escapes with \, SQL habit doubles '')
# or as a URL query parameter.
_KEY_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<secret>'(?:[^'\\]|\\.|'')*'|[^\s&'\"]+)", re.IGNORECASE)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with every password it may carry replaced by ***.

    `secrets` are known passwords (the store URL's): they are masked wherever they occur,
    also in the words of an error message that quotes them outside any URL.
    """
    shown = _URL_PASSWORD.sub(lambda m: m["head"] + MASK, text)
    shown = _KEY_PASSWORD.sub(lambda m: m["head"] + MASK, shown)
    for secret in secrets:
        if not secret:
            continue
        for form in {secret, quote(secret, safe=""), unquote(secret)}:
            if len(form) >= 3:  # masking one or two characters everywhere would garble the message
                shown = shown.replace(form, MASK)
    return shown
