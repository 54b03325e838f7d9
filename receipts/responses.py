"""How an HTTP response is kept in a receipt and rebuilt for a replay.

A receipt keeps a status, a content type and a body as text. Most bodies are UTF-8 text
and are stored as they are, readable in the admin and the dashboard. Two cases need more:
a body that is not UTF-8 text (or holds NUL, which PostgreSQL text refuses), and a
response whose meaning lives in a header (a redirect's Location). Those are stored as an
envelope: ENVELOPE followed by JSON with the body (base64 when binary) and the kept
headers. A text body that happens to start with ENVELOPE is wrapped too, so reading back
is never ambiguous.

Also the answers to a claim that does not run because another caller holds the key or the
key was used for another request (`refusal`): the same for every front door but for their
words.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.http import HttpResponse

from idemdash.core.problems import problem
from receipts.models import Attempt

if TYPE_CHECKING:
    from receipts.store import ClaimResult

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


# --- A claim that does not run ---------------------------------------------------------------


@dataclass(frozen=True)
class RefusalWords:
    """How one front door words the two refusals of a claim (`reused_detail` is formatted
    with the receipt's `operation`)."""

    in_progress_title: str
    in_progress_detail: str
    reused_title: str
    reused_detail: str


def refusal(result: ClaimResult, words: RefusalWords) -> HttpResponse | None:
    """The answer to a claim whose key another caller holds (409, with Retry-After: what is
    left of its lease) or that reused its key with another request (422); None otherwise."""
    if result.outcome == Attempt.Outcome.IN_PROGRESS:
        retry_after = result.retry_after
        return problem(
            409, "request-in-progress", words.in_progress_title, words.in_progress_detail,
            headers={"Retry-After": str(retry_after)}, retry_after=retry_after,
        )
    if result.outcome == Attempt.Outcome.MISMATCH:
        detail = words.reused_detail.format(operation=result.receipt.operation)
        return problem(422, "idempotency-key-reused", words.reused_title, detail)
    return None
