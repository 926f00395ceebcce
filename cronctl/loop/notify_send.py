"""One try at one owed notification (SPEC §12): a webhook POST, a healthchecks.io ping, or a mail.

Every try is bounded (TIMEOUT for connect and read) and ends in a `Result`: `sent`,
`retry` (a timeout, a refused connection, a 5xx or 429, a variable not set yet) or
`abandon` (the target refused it for good: another 4xx). `${VAR}` in a URL or address is
expanded from the loop's environment here, at send time, so tokens stay out of the jobs
file and the store. No error text carries the expanded URL: each is masked first.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from cronctl.jobs.notifyfields import mask
from cronctl.store.notify_owed import PING_SUFFIX, Item, Result

if TYPE_CHECKING:
    import urllib.request
    from email.message import EmailMessage

# smtplib, ssl, email and urllib.request are imported where a notification is sent: the
# engine imports this module, and `force-run` (which runs a job in its own process when
# no loop runs) would otherwise load them all (about 20 ms) to send nothing.

TIMEOUT = 10.0
SENDMAIL = ("/usr/sbin/sendmail", "/usr/lib/sendmail")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Unset(Exception):
    """A `${VAR}` the loop's environment does not have (yet)."""


def expand(text: str, env: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise Unset(f"${{{name}}} is not set in the loop's environment")
        return env[name]

    return _VAR.sub(one, text)


def send(item: Item, env: Mapping[str, str] | None = None, timeout: float = TIMEOUT) -> Result:
    """Try once; never raises (a notifier must not take the loop down)."""
    target, body = item.entry.get("target") or {}, item.entry.get("body") or {}
    env = os.environ if env is None else env
    try:
        if "url" in target:
            return _webhook(item, expand(str(target["url"]), env), body, timeout)
        if "ping" in target:
            return _ping(item, expand(str(target["ping"]), env), body, timeout)
        if "email" in target:
            return _email(item, expand(str(target["email"]), env), body, env, timeout)
        return Result(item.job, item.key, "abandon", "the target has no url, ping or email")
    except Unset as exc:
        return Result(item.job, item.key, "retry", str(exc))
    except Exception as exc:  # a bug or an odd target must not end the worker
        return Result(item.job, item.key, "retry", _scrub(f"{type(exc).__name__}: {exc}", target, env))


def _webhook(item: Item, url: str, body: dict[str, Any], timeout: float) -> Result:
    data = json.dumps(body, sort_keys=True).encode()
    return _post(item, url, data, "application/json", body, timeout)


def _ping(item: Item, base: str, body: dict[str, Any], timeout: float) -> Result:
    """healthchecks.io: /start when a run starts, the URL itself on success, /fail on failure;
    the run's output (text) goes along as the ping's body, which healthchecks.io keeps as its log."""
    event = str(item.entry.get("event"))
    suffix = PING_SUFFIX.get(event, "")
    url = base.rstrip("/") + suffix if suffix else base
    text = str(body.get("text") or "") + ("\n\n" + str(body["output"]) if body.get("output") else "")
    return _post(item, url, text.encode(), "text/plain; charset=utf-8", body, timeout)


def _post(item: Item, url: str, data: bytes, kind: str, body: dict[str, Any], timeout: float) -> Result:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=data, method="POST", headers={
        "Content-Type": kind, "Idempotency-Key": item.key, "User-Agent": "cronctl"})
    try:
        with _opener().open(request, timeout=timeout) as response:
            response.read(65536)
            code = int(response.status)
    except urllib.error.HTTPError as exc:
        code = int(exc.code)
        exc.close()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        # socket.timeout is TimeoutError (Python 3.10 on)
        words = "timed out" if isinstance(reason, TimeoutError) else str(reason)
        return Result(item.job, item.key, "retry", _scrub(words, {"url": url}, {}))
    if 200 <= code < 300:
        return Result(item.job, item.key, "sent", code=code)
    outcome = "retry" if code >= 500 or code in (408, 429) else "abandon"
    return Result(item.job, item.key, outcome, f"HTTP {code}", code)


def _opener() -> urllib.request.OpenerDirector:
    import urllib.request

    # No redirects: a POST that is redirected is not delivered, and the answer says so (3xx).
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(NoRedirect())


def _email(item: Item, address: str, body: dict[str, Any], env: Mapping[str, str], timeout: float) -> Result:
    import socket  # here, as smtplib: the engine imports this module, few runs send mail
    from email.message import EmailMessage

    message = EmailMessage()
    sender = env.get("CRONCTL_MAIL_FROM") or f"cronctl@{socket.gethostname()}"
    message["From"], message["To"] = sender, address
    message["Subject"] = str(body.get("text") or f"cronctl: {item.job} {item.entry.get('event')}")[:200]
    message["Message-ID"] = f"<{item.key}@cronctl>"
    message["Idempotency-Key"] = item.key
    message.set_content(_mail_text(body))
    smtp = env.get("CRONCTL_SMTP")
    if smtp:
        return _smtp(item, expand(smtp, env), message, timeout)
    return _sendmail(item, message, timeout)


def _mail_text(body: dict[str, Any]) -> str:
    lines = [str(body.get("text") or "")]
    for key in ("job", "run_id", "status", "reason", "exit_code", "started_at", "ended_at", "duration_s", "host"):
        if body.get(key) is not None:
            lines.append(f"{key}: {body[key]}")
    if body.get("output"):
        lines += ["", "output (last 4 KiB):", str(body["output"])]
    return "\n".join(lines) + "\n"


def _smtp(item: Item, url: str, message: EmailMessage, timeout: float) -> Result:
    """$CRONCTL_SMTP: smtp://[user[:password]@]host[:port] (STARTTLS when offered) or smtps://."""
    import smtplib
    import ssl

    parts = urlsplit(url)
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
        return Result(item.job, item.key, "abandon", f"$CRONCTL_SMTP {mask(url)!r} is not smtp[s]://host:port")
    try:
        if parts.scheme == "smtps":
            client: smtplib.SMTP = smtplib.SMTP_SSL(parts.hostname, parts.port or 465, timeout=timeout,
                                                    context=ssl.create_default_context())
        else:
            client = smtplib.SMTP(parts.hostname, parts.port or 25, timeout=timeout)
        with client:
            client.ehlo()
            if parts.scheme == "smtp" and client.has_extn("starttls"):
                client.starttls(context=ssl.create_default_context())
                client.ehlo()
            if parts.username:
                client.login(unquote(parts.username), unquote(parts.password or ""))
            client.send_message(message)
    except smtplib.SMTPResponseException as exc:
        outcome = "retry" if exc.smtp_code >= 400 and exc.smtp_code < 500 else "abandon"
        return Result(item.job, item.key, outcome, f"SMTP {exc.smtp_code}", exc.smtp_code)
    except (OSError, smtplib.SMTPException) as exc:
        return Result(item.job, item.key, "retry", f"SMTP {parts.hostname}: {exc}")
    return Result(item.job, item.key, "sent")


def _sendmail(item: Item, message: EmailMessage, timeout: float) -> Result:
    import shutil
    import subprocess

    program = next((p for p in SENDMAIL if os.access(p, os.X_OK)), None) or shutil.which("sendmail")
    if program is None:
        return Result(item.job, item.key, "retry", "no $CRONCTL_SMTP and no sendmail on this host")
    try:
        done = subprocess.run([program, "-t", "-oi"], input=message.as_bytes(), capture_output=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Result(item.job, item.key, "retry", f"sendmail: {exc}")
    if done.returncode != 0:
        return Result(item.job, item.key, "retry", f"sendmail exited {done.returncode}: "
                      f"{done.stderr.decode(errors='replace').strip()[:200]}")
    return Result(item.job, item.key, "sent")


def _scrub(text: str, target: dict[str, Any], env: Mapping[str, str]) -> str:
    """An error message without any URL's path or query (they carry tokens)."""
    for value in target.values():
        if isinstance(value, str):
            for form in {value, _safe_expand(value, env)}:
                if form:
                    text = text.replace(form, mask(form))
    return re.sub(r"(https?://[^/\s'\"]+)/[^\s'\"]+", r"\1/***", text)


def _safe_expand(text: str, env: Mapping[str, str]) -> str:
    try:
        return expand(text, env)
    except Unset:
        return ""
