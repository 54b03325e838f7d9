"""How an HTTP response is kept in a receipt and rebuilt for a replay.

A receipt keeps a status, a content type and a body as text. Most bodies are UTF-8 text
and are stored as they are, readable in the admin and the dashboard; the rest, and any
response with headers of its own, are stored as an envelope (`encode`). A replay carries
the headers the view set but those that belong to one connection or one moment
(`kept_headers`), as drf-idempotency does (docs/http-contract.md: Replays).

Also the answers to a claim that does not run because another caller holds the key or the
key was used for another request (`refusal`): the same for every front door but for their words."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.http import HttpResponse

from idemdash.core.problems import problem
from receipts.conf import setting
from receipts.models import Attempt, Receipt

if TYPE_CHECKING:
    from receipts.store import ClaimResult

ENVELOPE = "idemdash:envelope:v1:"

# Never replayed (lower case): hop-by-hop headers (RFC 9110 7.6.1), which describe one
# connection; Set-Cookie, which would hand the first caller's session to whoever repeats
# the key; Date, which a server sets for the moment it answers; Content-Type, kept in the
# receipt's own field; Content-Length, which Django computes again from the body.
NOT_REPLAYED = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade",
    "set-cookie", "date", "content-type", "content-length",
})


def encode(content: bytes, headers: dict[str, str] | None = None) -> str:
    """The text a receipt keeps for a body and its `kept_headers`. A body that is not UTF-8
    text (or holds NUL, which PostgreSQL text refuses), or one with kept headers (a
    redirect's Location, an ETag, a DRF view's Allow), is stored as an envelope: ENVELOPE
    followed by JSON with the body (base64 when binary) and the headers, in the view's order.
    A text body that happens to start with ENVELOPE is wrapped too, so reading back is never
    ambiguous."""
    kept = headers or {}
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
    """The headers a replay carries, in the view's order: all it set but NOT_REPLAYED, the
    names its Connection header lists (hop-by-hop too), and RECEIPTS_REPLAY_EXCLUDED_HEADERS."""
    headers = response.headers
    if len(headers) == 1 and "Content-Type" in headers:
        return {}  # the usual response: nothing to keep, nothing to look up
    excluded = NOT_REPLAYED | {name.lower() for name in setting("RECEIPTS_REPLAY_EXCLUDED_HEADERS")}
    if "Connection" in headers:
        excluded |= {token.strip().lower() for token in headers["Connection"].split(",")}
    return {name: value for name, value in headers.items() if name.lower() not in excluded}


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
    left of its lease), whose last attempt's outcome is unknown (409 outcome-unknown), whose
    request another key made (409 fresh-key-retry), that replays a compacted receipt (410
    receipt-compacted), or that reused its key with another request (422); None otherwise."""
    if result.outcome == Attempt.Outcome.IN_PROGRESS:
        retry_after = result.retry_after
        return problem(
            409, "request-in-progress", words.in_progress_title, words.in_progress_detail,
            headers={"Retry-After": str(retry_after)}, retry_after=retry_after,
        )
    if result.outcome == Attempt.Outcome.OUTCOME_UNKNOWN:
        # 409, not 5xx: nothing failed on this server, and a generic retry policy (urllib3,
        # a proxy, an agent framework) retries a 5xx blindly, which is what "hold" exists to
        # prevent. No Retry-After: only a reconcile or an operator changes the answer.
        return problem(
            409, "outcome-unknown", "The outcome of the last attempt with this key is unknown",
            "Its attempt stopped before it settled and may have had its effect; it is not run again "
            "until its outcome is resolved (by the operation's reconcile function or by an operator).",
        )
    if result.outcome == Attempt.Outcome.FRESH_KEY_RETRY:
        # 409 as for a key in use: the request is sound, the key is the wrong one. No
        # Retry-After: the same request under this key is refused until the window ends.
        first = result.receipt
        return problem(
            409, "fresh-key-retry", "This request was already made under another key",
            f"The same request was made under the key {first.key!r} at {first.created_at.isoformat()}; this "
            "operation refuses it again under a new key. Send it with that key to get its result.",
            first_key=first.key, first_seen_at=first.created_at.isoformat(),
        )
    if result.outcome == Attempt.Outcome.REPLAYED and result.receipt.compacted_at is not None:
        return compacted(result.receipt)
    if result.outcome == Attempt.Outcome.MISMATCH:
        detail = words.reused_detail.format(operation=result.receipt.operation)
        return problem(422, "idempotency-key-reused", words.reused_title, detail)
    return None


# The header that carries a compacted receipt's original status beside the problem's field.
ORIGINAL_STATUS_HEADER = "Idempotent-Original-Status"


def compacted(receipt: Receipt) -> HttpResponse:
    """The replay of a receipt whose body compaction dropped (receipts/compaction.py): 410,
    because the stored answer is gone for good and asking again will not bring it back; not a
    2xx, which a caller would read as this request's own answer with an empty body; not a 5xx,
    which generic retry policies retry; and not 409, which says "try again later". The
    operation ran, and the key still refuses to run it again until it expires."""
    original = receipt.response_status or 200
    return problem(
        410, "receipt-compacted", "The stored result of this request was dropped by compaction",
        f"The operation ran (key {receipt.key!r}, answered {original}) and will not run again; "
        "its stored response was dropped after the operation's compaction window. Look the result "
        "up where the operation keeps it.",
        headers={ORIGINAL_STATUS_HEADER: str(original)},
        original_status=original,
        compacted_at=receipt.compacted_at.isoformat(),
    )
