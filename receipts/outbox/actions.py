"""What an outbox message does: a registry of named actions, and the two built-ins.

An action is `perform(payload, ctx) -> int | None` (an HTTP-like status code to log, if it
has one). It signals failure by raising RetryableError (with an optional retry_after) or
PermanentError; any other exception counts as retryable. Every action receives the
message's idempotency key in `ctx.key` and must pass it downstream, because delivery is
at least once: a drainer that dies after the side effect but before recording it leaves
the message to be performed again.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.validators import validate_email

from idemdash.core import tracing
from idemdash.core.attempts import RETRYABLE_4XX
from idemdash.core.masking import mask_text
from idemdash_client.retries import parse_retry_after
from receipts.keys import format_key
from receipts.outbox import fence

Perform = Callable[[Any, "ActionContext"], "int | None"]
Validate = Callable[[Any], None]
Destination = Callable[[Any], str]


class RetryableError(Exception):
    def __init__(self, message: str, *, retry_after: float | None = None, status_code: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status_code = status_code


class PermanentError(Exception):
    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class UnknownAction(ValueError):
    pass


class InvalidPayload(ValueError):
    """A payload its action could never send, refused at enqueue. `field` says where:
    `payload`, `payload.url`, `payload.headers.<name>`, `payload.subject`, ..."""

    def __init__(self, message: str, field: str = "payload") -> None:
        super().__init__(message)
        self.field = field


# An action's name, as enqueue takes it (and a pause names it).
ACTION_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")

# Control characters (CR, LF and NUL among them): in a header they would split it or be
# refused by the sender at every attempt; in a URL the same.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# RFC 9110 section 5.6.2: a header name is a token.
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


@dataclass(frozen=True)
class ActionContext:
    key: str
    scope: str
    attempt: int
    timeout: float


@dataclass(frozen=True)
class Action:
    name: str
    perform: Perform
    validator: Validate | None = None
    # The host a (validated) payload goes to, for pausing by destination; none by default.
    destination: Destination | None = None

    def validate(self, payload: Any) -> None:
        """Refuse a payload at enqueue time (ValueError) rather than at its first attempt."""
        if self.validator is not None:
            self.validator(payload)

    def destination_host(self, payload: Any) -> str:
        """Where this payload goes, lower case, at most 255 characters; "" if the action does not say."""
        return (self.destination(payload) or "").lower()[:255] if self.destination else ""


_registry: dict[str, Action] = {}


def outbox_action(
    name: str, *, validate: Validate | None = None, destination: Destination | None = None
) -> Callable[[Perform], Perform]:
    def register(perform: Perform) -> Perform:
        _registry[name] = Action(name, perform, validate, destination)
        return perform

    return register


def get_action(name: str) -> Action:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownAction(f"No outbox action is registered as {name!r}.") from None


def registered() -> list[str]:
    return sorted(_registry)


# --- http.post --------------------------------------------------------------------------

_client: tuple[int, httpx.Client] | None = None


def http_client() -> httpx.Client:
    """One client per process: building one loads the CA bundle (tens of milliseconds), and
    a client must not cross a fork, whose child would share its sockets. Its transport is
    fenced (receipts.outbox.fence); with a transport given, httpx ignores proxy variables."""
    global _client
    if _client is None or _client[0] != os.getpid():
        _client = (os.getpid(), httpx.Client(follow_redirects=False, transport=fence.FencedTransport()))
    return _client[1]


def _validate_http_post(payload: Any) -> None:
    if not isinstance(payload, dict):
        raise InvalidPayload("http.post needs a payload object with a url.")
    url = payload.get("url")
    if not isinstance(url, str) or CONTROL.search(url) or " " in url:
        raise InvalidPayload("http.post needs `url`, an http or https URL without spaces or control characters.",
                             "payload.url")
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise InvalidPayload(f"http.post `url` cannot be parsed: {exc}", "payload.url") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise InvalidPayload("http.post needs `url`, an http or https URL.", "payload.url")
    # Without a list any host goes, though only to public addresses, which the fence
    # checks when the drain connects; with a list, only the hosts listed.
    allowed = fence.allowed_hosts()
    if allowed and hostname.lower() not in allowed:
        raise InvalidPayload(f"http.post may not post to {hostname!r}: not in OUTBOX_HTTP_ALLOWED_HOSTS.",
                             "payload.url")
    headers = payload.get("headers", {})
    if not isinstance(headers, dict):
        raise InvalidPayload("http.post `headers` must be an object of strings.", "payload.headers")
    for name, value in headers.items():
        field = f"payload.headers.{name}"
        if not TOKEN.fullmatch(name):
            raise InvalidPayload("A header name is letters, digits and !#$%&'*+-.^_`|~ only.", field)
        # The HTTP client sends header values as ASCII: anything else would fail every attempt.
        if not isinstance(value, str) or not value.isascii() or CONTROL.search(value.replace("\t", " ")):
            raise InvalidPayload("A header value is a string of printable ASCII, without CR, LF or NUL.", field)


def _http_post_host(payload: dict) -> str:
    return urlsplit(payload["url"]).hostname or ""


@outbox_action("http.post", validate=_validate_http_post, destination=_http_post_host)
def http_post(payload: dict, ctx: ActionContext) -> int:
    """POST `payload["json"]` to `payload["url"]` with the message key as Idempotency-Key
    (bare, or as a structured-field string when it would not read back bare: see
    `receipts.keys.format_key`).

    2xx is sent; 408, 409, 425, 429, 5xx, timeouts and connection errors are retried; any
    other status (other 4xx, and redirects, which are not followed) is permanent. So is a
    target the fence refuses ("Blocked by policy"): the policy does not change between
    retries, and after the operator changes it, "Send again" sends the message again.
    """
    try:
        _validate_http_post(payload)  # the allow-list may have shrunk since enqueue
    except InvalidPayload as exc:
        raise PermanentError(f"{exc.field}: {exc}") from exc
    # The send's trace context (tracing.carrier: none when not traced) after the payload's
    # headers, so a stored `traceparent` cannot claim another trace.
    headers = {**payload.get("headers", {}), "Idempotency-Key": format_key(ctx.key), "User-Agent": "idemdash-outbox",
               **tracing.carrier()}
    try:
        response = http_client().post(
            payload["url"], json=payload.get("json", {}), headers=headers, timeout=ctx.timeout
        )
    except fence.Blocked as exc:
        raise PermanentError(str(exc)) from exc
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, httpx.LocalProtocolError, UnicodeError) as exc:
        # The request itself cannot be sent (a URL or header the client refuses): the same
        # at every attempt, so retrying cannot fix it.
        raise PermanentError(mask_text(f"{type(exc).__name__}: {exc}")) from exc
    except httpx.HTTPError as exc:  # timeouts, refused connections, resets
        raise RetryableError(mask_text(f"{type(exc).__name__}: {exc}")) from exc
    status = response.status_code
    if 200 <= status < 300:
        return status
    detail = mask_text(f"HTTP {status}: {response.text[:500]}")
    if status in RETRYABLE_4XX or status >= 500:
        raise RetryableError(
            detail, retry_after=parse_retry_after(response.headers.get("Retry-After")), status_code=status
        )
    raise PermanentError(detail, status_code=status)


# --- email.send -------------------------------------------------------------------------


def _addresses(value: Any, field: str = "payload.to") -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidPayload("email.send addresses are a string or a list of strings.", field)
    for address in value:
        # A CR or LF would add a header (Django refuses it at every send with a ValueError).
        if CONTROL.search(address):
            raise InvalidPayload("An email address may not hold CR, LF, NUL or other control characters.", field)
        try:
            validate_email(parseaddr(address)[1])
        except ValidationError:
            raise InvalidPayload(f"{address!r} is not an email address.", field) from None
    return value


def _validate_email_send(payload: Any) -> None:
    if not isinstance(payload, dict):
        raise InvalidPayload("email.send needs a payload object with to, subject and body.")
    if not _addresses(payload.get("to")):
        raise InvalidPayload("email.send needs at least one address in `to`.", "payload.to")
    _addresses(payload.get("cc", []), "payload.cc")
    if payload.get("from") is not None:
        if not isinstance(payload["from"], str):
            raise InvalidPayload("email.send `from` is one address, a string.", "payload.from")
        _addresses(payload["from"], "payload.from")
    for field in ("subject", "body"):
        if not isinstance(payload.get(field), str):
            raise InvalidPayload(f"email.send needs `{field}`, a string.", f"payload.{field}")
    if CONTROL.search(payload["subject"].replace("\t", " ")):
        raise InvalidPayload("An email subject is one line: no CR, LF, NUL or other control characters.",
                             "payload.subject")


def message_id_for(key: str) -> str:
    """The same key always gives the same Message-ID, so that a mail system (or a person)
    can recognise a message sent twice by an at-least-once drain."""
    domain = settings.DEFAULT_FROM_EMAIL.rpartition("@")[2] or "localhost"
    return f"<outbox.{hashlib.sha256(key.encode()).hexdigest()[:32]}@{domain}>"


@outbox_action("email.send", validate=_validate_email_send)
def email_send(payload: dict, ctx: ActionContext) -> None:
    """Send through Django's email backend, with a Message-ID derived from the key. A
    payload its validator refuses (enqueued before the rule, or by a direct write) and a
    header Django refuses are permanent: no retry would change them."""
    import smtplib

    try:
        _validate_email_send(payload)
    except InvalidPayload as exc:
        raise PermanentError(f"{exc.field}: {exc}") from exc
    email = EmailMessage(
        subject=payload["subject"],
        body=payload["body"],
        from_email=payload.get("from") or settings.DEFAULT_FROM_EMAIL,
        to=_addresses(payload["to"]),
        cc=_addresses(payload.get("cc", [])),
        headers={"Message-ID": message_id_for(ctx.key), "X-Idempotency-Key": ctx.key},
    )
    try:
        email.send(fail_silently=False)
    # A header Django refuses is a ValueError (BadHeaderError on Django 5.2 is one; 6.1
    # deprecates that name for ValueError itself): no retry would change it.
    except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused, ValueError) as exc:
        raise PermanentError(f"{type(exc).__name__}: {exc}") from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise RetryableError(f"{type(exc).__name__}: {exc}") from exc
    return None
