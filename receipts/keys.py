"""What a key is and whose: the Idempotency-Key header read and written, a key and an
operation validated (once, at each front door: the decorator, run_once, the JSON API), and
the scope that keeps one caller's keys apart from another's."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils.crypto import salted_hmac
from django.utils.functional import LazyObject

from idemdash.core.clients import client_for_request

HEADER = "Idempotency-Key"
MAX_LENGTH = 255  # the receipt's key column
KEY_RE = re.compile(rf"^[\x20-\x7e]{{1,{MAX_LENGTH}}}$")
OPERATION_RE = re.compile(r"^[A-Za-z0-9_.:\-/]{1,100}$")


class InvalidKey(ValueError):
    pass


class InvalidOperation(ValueError):
    pass


def validate_key(key: Any) -> str:
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise InvalidKey("An idempotency key is 1 to 255 printable ASCII characters.")
    return key


def validate_operation(operation: Any) -> str:
    if not isinstance(operation, str) or not OPERATION_RE.fullmatch(operation):
        raise InvalidOperation(
            "An operation is 1 to 100 characters of letters, digits and . _ : - /"
        )
    return operation


_OWS = " \t"  # HTTP's optional whitespace around a header's value


def parse_key(raw: str) -> str | None:
    """The key of an Idempotency-Key header, or None when it is malformed.

    A server joins a header sent twice into one value with "," (RFC 9110 5.3), so a bare key
    holding a comma is refused rather than read as one key: `a, b` may be two keys, and
    taking either would settle the other's request. A key that needs a comma is sent as a
    structured-field string (RFC 8941 3.3.3), `"a,b"`, where the comma is inside the quotes
    and `\\"` and `\\\\` are escapes; anything after its closing quote (`"a", "b"`) is refused.
    So is a bare key that begins or ends with `"`: such a key is sent as a structured-field string.
    Around the value only HTTP's optional whitespace (space, tab: RFC 9110 5.6.3) is dropped:
    str.strip() would also drop NEL and other Unicode spaces, which a WSGI server hands over
    as text and an ASGI one as other text (its bytes as latin-1), so the same header would
    be a valid key to one kind of view and not to another.
    """
    value = raw.strip(_OWS)
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = _sf_string(value)
    elif "," in value or value.startswith('"') or value.endswith('"'):
        # A bare `"` at either end is half a quoted string: two such headers joined (`"` and
        # `"` give `","`) would read as the quoted key `,`.
        return None
    try:
        return validate_key(value)
    except InvalidKey:
        return None


def format_key(key: str) -> str:
    """The Idempotency-Key header value that `parse_key` reads back as `key`, for sending a
    key downstream (the outbox's http.post): the key itself, or a structured-field string
    when it holds a comma, begins or ends with `"`, or begins or ends with a space (a
    server strips those from a bare value)."""
    if "," in key or key.startswith('"') or key.endswith('"') or key != key.strip(_OWS):
        return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return key


def _sf_string(quoted: str) -> str | None:
    chars = []
    escaped = False
    for index, char in enumerate(quoted[1:], start=1):
        if escaped:
            if char not in '"\\':
                return None
            chars.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            return "".join(chars) if index == len(quoted) - 1 else None
        else:
            chars.append(char)
    return None


def parse_prefer_wait(header: str) -> int | None:
    """The `wait` preference of a Prefer header (RFC 7240), or None. Unparsable is ignored,
    as RFC 7240 asks of preferences a server does not understand."""
    for preference in header.split(","):
        token, _, value = preference.split(";")[0].strip().partition("=")
        if token.strip().lower() == "wait":
            try:
                seconds = int(value.strip().strip('"'))
            except ValueError:
                return None
            return seconds if seconds >= 0 else None
    return None


def default_scope(request: HttpRequest) -> str:
    """`user:<pk>` for the logged-in user, else `client:<name>` for an idemdash bearer
    token, else the subject of verified JWT claims an auth framework left in `request.auth`
    without a user (DRF's), else the scope of the request's credentials, else `anonymous`."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    client = client_for_request(request)
    if client is not None:
        return client.scope
    return subject_scope(getattr(request, "auth", None)) or credential_scope(request) or "anonymous"


def known_caller(request: HttpRequest) -> str:
    """The caller as far as the request already tells, at no query: `user:<pk>` when the user
    was looked up (by the view or a middleware), else the scope of its credentials, else
    `anonymous`. For the observer, which must not load a session or a user the view never
    needed (default_scope may do both)."""
    user = request.__dict__.get("user")
    if user is None or isinstance(user, LazyObject):
        # What AuthenticationMiddleware looked up, by `request.user` or `await request.auser()`
        # (which leaves the lazy `user` unevaluated): it keeps it under these names
        # (tests/core/test_dependency_guards.py holds Django to them).
        user = request.__dict__.get("_cached_user") or request.__dict__.get("_acached_user")
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return credential_scope(request) or "anonymous"


def subject_scope(auth: Any) -> str | None:
    """`subject:<sub>`, or `subject:<iss> <sub>` with an issuer, for the claims of a JWT that an
    auth class verified and decoded (a mapping with a `sub`); None for anything else. The
    subject, not the token: a caller whose access token was refreshed between two tries of one
    key is the same caller, and gets its replay (hashing the token made it another, and ran the
    effect again)."""
    if not isinstance(auth, Mapping):
        return None
    subject, issuer = _claim(auth.get("sub")), _claim(auth.get("iss"))
    if not subject:
        return None
    scope = f"subject:{issuer} {subject}" if issuer else f"subject:{subject}"
    # Receipt.scope holds 255 characters: a longer issuer and subject are told apart by their hash.
    return scope if len(scope) <= 255 else "subject:sha256:" + hashlib.sha256(scope.encode()).hexdigest()


def _claim(value: Any) -> str:
    """A JWT claim as text: a string or an integer (some issuers number their subjects)."""
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else ""


def credential_scope(request: HttpRequest, *credentials: str) -> str | None:
    """`credential:<hmac>` of the request's Authorization header, its session cookie and
    any further `credentials`, or None when it carries none of them.

    For a caller the decorator cannot name: an auth framework that authenticates inside the
    view leaves no user, yet two callers with different credentials must never share keys.
    All of them are hashed together, so that a header every user sends alike (a proxy's
    Basic auth) does not join the sessions behind it. Keyed by SECRET_KEY (salted_hmac), so
    that a database reader cannot brute-force a short token from the stored scope; rotating
    SECRET_KEY therefore starts these callers' keys anew.
    """
    material = [
        request.headers.get("Authorization", ""),
        request.COOKIES.get(settings.SESSION_COOKIE_NAME, ""),
        *credentials,
    ]
    if not any(material):
        return None
    digest = salted_hmac(CREDENTIAL_SALT, json.dumps(material), algorithm="sha256").hexdigest()
    return f"credential:{digest}"


CREDENTIAL_SALT = "receipts.keys.credential_scope"


def session_reference(session_key: str | None) -> str:
    """What a receipt records of the caller's session: `session:<hmac>`, which tells two
    sessions apart on the receipt page and in the admin. Never the session key itself: whoever
    reads that can act as the session. Keyed by SECRET_KEY as credential_scope is."""
    if not session_key:
        return ""
    return "session:" + salted_hmac(SESSION_SALT, session_key, algorithm="sha256").hexdigest()[:32]


SESSION_SALT = "receipts.keys.session_reference"
