"""How an HTTP response is kept in a receipt and rebuilt for a replay (docs/http-contract.md:
Replays): a UTF-8 body as it is, anything else as an envelope (`encode`), with the headers
that do not belong to one connection or moment (`kept_headers`). Also the answers to a claim
that does not run (`refusal`), the same for every front door but for their words."""

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

# Never replayed: hop-by-hop headers (RFC 9110 7.6.1); Set-Cookie, which would hand the first
# caller's session to whoever repeats the key; Date; Content-Type and Content-Length, kept apart.
NOT_REPLAYED = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade",
    "set-cookie", "date", "content-type", "content-length",
})


def encode(content: bytes, headers: dict[str, str] | None = None) -> str:
    """The text a receipt keeps for a body and its `kept_headers`: the text itself, or, for a
    body that is not UTF-8 (or holds NUL), has kept headers or starts with ENVELOPE, ENVELOPE
    and JSON with the body (base64 when binary) and the headers."""
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
    """The headers a replay carries, in the view's order: all but those never replayed or excluded."""
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


@dataclass(frozen=True)
class RefusalWords:
    """How one front door words the two refusals (`reused_detail` formatted with `operation`)."""

    in_progress_title: str
    in_progress_detail: str
    reused_title: str
    reused_detail: str


def refusal(result: ClaimResult, words: RefusalWords) -> HttpResponse | None:
    """The problem answering a claim that does not run (409, 410 compacted, 422 reused), or None."""
    if result.outcome == Attempt.Outcome.IN_PROGRESS:
        retry_after = result.retry_after
        return problem(
            409, "request-in-progress", words.in_progress_title, words.in_progress_detail,
            headers={"Retry-After": str(retry_after)}, retry_after=retry_after,
        )
    if result.outcome == Attempt.Outcome.OUTCOME_UNKNOWN:
        # 409, not 5xx, which generic retry policies retry blindly; no Retry-After: only a
        # reconcile or an operator changes the answer.
        return problem(
            409, "outcome-unknown", "The outcome of the last attempt with this key is unknown",
            "Its attempt stopped before it settled and may have had its effect; it is not run again "
            "until its outcome is resolved (by the operation's reconcile function or by an operator).",
        )
    if result.outcome == Attempt.Outcome.FRESH_KEY_RETRY:
        # The request is sound, the key the wrong one; no Retry-After: refused until the window ends.
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


ORIGINAL_STATUS_HEADER = "Idempotent-Original-Status"


def compacted(receipt: Receipt) -> HttpResponse:
    """The replay of a receipt whose body compaction dropped: 410, gone for good (a 2xx would
    read as an empty answer, a 5xx be retried, a 409 say "later"); the operation does not run again."""
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
