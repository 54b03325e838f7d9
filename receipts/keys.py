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

    A header sent twice is joined with "," (RFC 9110 5.3), so a bare key holding a comma, or
    beginning or ending with `"`, is refused: such a key is sent as a structured-field string
    (RFC 8941 3.3.3), `"a,b"`. Only HTTP's optional whitespace is stripped around the value:
    str.strip() would also drop Unicode spaces, which WSGI and ASGI servers decode differently."""
    value = raw.strip(_OWS)
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = _sf_string(value)
    elif "," in value or value.startswith('"') or value.endswith('"'):
        return None
    try:
        return validate_key(value)
    except InvalidKey:
        return None


def format_key(key: str) -> str:
    """The Idempotency-Key header value that `parse_key` reads back as `key`."""
    if "," in key or key.startswith('"') or key.endswith('"') or key != key.strip(_OWS):
        return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return key


# A structured-field string (RFC 8941 3.3.3): `\"` and `\\` are its only escapes.
SF_STRING_RE = re.compile(r'"((?:[^"\\]|\\["\\])*)"')


def _sf_string(quoted: str) -> str | None:
    match = SF_STRING_RE.fullmatch(quoted)
    return re.sub(r'\\(["\\])', r"\1", match.group(1)) if match else None


def parse_prefer_wait(header: str) -> int | None:
    """The `wait` preference of a Prefer header (RFC 7240), or None (unparsable is ignored)."""
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
    """`user:<pk>`, else `client:<name>` for an idemdash bearer token, else the subject of the
    verified JWT claims in `request.auth`, else the request's credentials, else `anonymous`."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    client = client_for_request(request)
    if client is not None:
        return client.scope
    return subject_scope(getattr(request, "auth", None)) or credential_scope(request) or "anonymous"


def known_caller(request: HttpRequest) -> str:
    """The caller as far as the request tells at no query (the observer must not load a user)."""
    user = request.__dict__.get("user")
    if user is None or isinstance(user, LazyObject):
        # Where AuthenticationMiddleware keeps what it looked up (tests/core/test_dependency_guards.py).
        user = request.__dict__.get("_cached_user") or request.__dict__.get("_acached_user")
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return credential_scope(request) or "anonymous"


def subject_scope(auth: Any) -> str | None:
    """`subject:[<iss> ]<sub>` for the verified claims of a JWT (a mapping with a `sub`), else
    None: the subject, not the token, so a refreshed token is still the same caller."""
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
    """`credential:<hmac>` of the request's Authorization header, session cookie and further
    `credentials`, hashed together (so a header every user sends alike does not join their
    sessions) and keyed by SECRET_KEY; None when it carries none of them."""
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
    """`session:<hmac>`, never the session key itself, whose reader could act as the session."""
    if not session_key:
        return ""
    return "session:" + salted_hmac(SESSION_SALT, session_key, algorithm="sha256").hexdigest()[:32]


SESSION_SALT = "receipts.keys.session_reference"
