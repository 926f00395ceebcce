"""What may be said of a store URL that cannot be parsed: its scheme and its host, nothing else.

A URL that does not parse cannot be redacted reliably (where its password begins and
ends is exactly what is unknown), so it is never echoed (SPEC §9): an error names the
scheme and the host when they can be told apart for certain, and says what is wrong in
words of its own. libpq's parse errors quote the offending token, which may be the
password: only their words are kept, never what they quote. No psycopg here: this
module also speaks when the driver is missing.
"""

from __future__ import annotations

import re

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):")
# A host name, an IPv4 address, or a bracketed IPv6 address: nothing else is shown as a host.
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])$")
# libpq's messages put what they found in double quotes.
_QUOTED = re.compile(r'"[^"]*"')
_KEYWORD = re.compile(r'"[a-z_]{1,40}"')


def shape(text: str) -> str:
    """`scheme 'S', host 'H'` of an unparsable URL, each only when certain; never the rest."""
    found = _SCHEME.match(text)
    scheme = found["scheme"] if found and text[found.end():].startswith("//") else None
    host = _host_of(text) if scheme else None
    words = [f"scheme {scheme!r}" if scheme else "no scheme", f"host {host!r}" if host else "host not shown"]
    return ", ".join(words)


def _host_of(text: str) -> str | None:
    authority = re.split(r"[/?#]", text.split("://", 1)[1], maxsplit=1)[0]
    if "@" not in authority and ":" in authority.split("]")[-1] and not authority.startswith("["):
        # user:password without its @ would look like host:port: say nothing of it.
        port = authority.rsplit(":", 1)[1]
        if not port.isdigit():
            return None
    host = authority.rsplit("@", 1)[-1]
    if host.startswith("["):
        if "]" not in host:
            return None
        host = host.split("]", 1)[0] + "]"
    else:
        host = host.split(":", 1)[0]
    return host if host and _HOST.match(host) else None


def libpq_words(message: str) -> str:
    """libpq's parse error without what it quotes (the token may be the password), except
    the name of an unknown query parameter (a keyword, shown so it can be fixed)."""
    first = message.strip().splitlines()[0] if message.strip() else "cannot parse it"
    if first.startswith("invalid URI query parameter") and _KEYWORD.fullmatch(first.split(":", 1)[1].strip()):
        return first
    return _QUOTED.sub("(not shown)", first).rstrip(": ")
