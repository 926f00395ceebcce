"""Job output shown on a terminal without letting it drive the terminal.

A job's output is written by whatever the job ran: a clear-screen, a cursor move or a
window-title sequence in it would act on the operator's terminal. On a terminal,
`cronctl logs` shows it as `less -R` does: colour (SGR) sequences pass, every other
control byte is written as `\\xNN`; newlines and tabs stay. `--raw` (or a pipe) gets the
bytes as they are.
"""

from __future__ import annotations

import re

_SGR = re.compile(rb"\x1b\[[0-9;]*m")
_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")
_TAIL = 32  # an escape sequence cut by a chunk boundary is at most this long


def _escape_controls(data: bytes) -> bytes:
    return _CONTROL.sub(lambda m: b"\\x%02x" % m.group()[0], data)


class TerminalSafe:
    """Escapes a stream chunk by chunk; a colour sequence cut between two chunks is kept whole."""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._carry + chunk
        cut = data.rfind(b"\x1b", max(0, len(data) - _TAIL))
        if cut >= 0 and not _SGR.match(data, cut) and re.fullmatch(rb"\x1b(\[[0-9;]*)?", data[cut:]):
            data, self._carry = data[:cut], data[cut:]  # perhaps the start of a colour: wait for the rest
        else:
            self._carry = b""
        return self._escape(data)

    def end(self) -> bytes:
        rest, self._carry = self._carry, b""
        return self._escape(rest)

    @staticmethod
    def _escape(data: bytes) -> bytes:
        out: list[bytes] = []
        last = 0
        for match in _SGR.finditer(data):
            out.append(_escape_controls(data[last:match.start()]))
            out.append(match.group())
            last = match.end()
        out.append(_escape_controls(data[last:]))
        return b"".join(out)
