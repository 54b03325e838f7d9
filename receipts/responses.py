"""How an HTTP response is kept in a receipt and rebuilt for a replay.

A receipt keeps a status, a content type and a body as text. Most bodies are UTF-8 text
and are stored as they are, readable in the admin and the dashboard. Two cases need more:
a body that is not UTF-8 text (or holds NUL, which PostgreSQL text refuses), and a
response whose meaning lives in a header (a redirect's Location). Those are stored as an
envelope: ENVELOPE followed by JSON with the body (base64 when binary) and the kept
headers. A text body that happens to start with ENVELOPE is wrapped too, so reading back
is never ambiguous.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from django.http import HttpResponse

ENVELOPE = "idemdash:envelope:v1:"

# Headers that change what a stored response means; everything else is rebuilt by Django.
KEPT_HEADERS = ("Location", "Content-Location", "Content-Disposition")


def encode(content: bytes, headers: dict[str, str] | None = None) -> str:
    kept = {name: value for name, value in (headers or {}).items() if name in KEPT_HEADERS}
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and "\x00" not in text and not kept and not text.startswith(ENVELOPE):
        return text
    envelope: dict[str, Any] = {"headers": kept}
    if text is not None and "\x00" not in text:
        envelope["body"] = text
    else:
        envelope["body_base64"] = base64.b64encode(content).decode("ascii")
    return ENVELOPE + json.dumps(envelope, separators=(",", ":"))


def decode(stored: str) -> tuple[bytes, dict[str, str]]:
    if not stored.startswith(ENVELOPE):
        return stored.encode("utf-8"), {}
    envelope = json.loads(stored[len(ENVELOPE) :])
    if "body_base64" in envelope:
        content = base64.b64decode(envelope["body_base64"])
    else:
        content = envelope.get("body", "").encode("utf-8")
    return content, dict(envelope.get("headers") or {})


def kept_headers(response: HttpResponse) -> dict[str, str]:
    return {name: response[name] for name in KEPT_HEADERS if response.has_header(name)}


def rebuild(status: int | None, content_type: str, stored: str) -> HttpResponse:
    content, headers = decode(stored)
    response = HttpResponse(content, status=status or 200, content_type=content_type or None)
    if not content_type:
        del response["Content-Type"]
    for name, value in headers.items():
        response[name] = value
    return response
