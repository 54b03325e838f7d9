"""POST /api/v1/outbox: enqueue a message from outside Django, with a bearer token.

Keys are scoped to the API client (like Stripe's), so two clients never collide on a
key; the key goes downstream exactly as the client sent it.

Method, token, media type, size and the JSON itself are checked by the one front door
(`idemdash.core.jsonapi`), as for the receipts API; text no database stores in the payload
is refused here on every database, before the message is checked or written.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from idemdash_client.canonical import UnstorableJSON
from idemdash.core.clients import ApiClient
from idemdash.core.jsonapi import json_api, storable_text
from idemdash.core.problems import problem
from idemdash.core.reference_rows import listed
from receipts import api as receipts_api
from receipts.outbox import store
from receipts.outbox.actions import InvalidPayload
from receipts.outbox.models import OutboxMessage


def message_json(message: OutboxMessage) -> dict[str, Any]:
    return {
        "id": message.pk,
        "key": message.key,
        "action": message.action,
        "status": message.status,
        "attempts": message.attempts,
        "next_attempt_at": message.next_attempt_at.isoformat(),
        "created_at": message.created_at.isoformat(),
        "sent_at": message.sent_at.isoformat() if message.sent_at else None,
        "references": listed(message.references.order_by("pk")),
    }


@json_api("POST")
def enqueue(request: HttpRequest, client: ApiClient, body: dict) -> HttpResponse:
    storable_text(body, "payload")
    references = receipts_api.references_field(body)
    try:
        result = store.enqueue(
            body.get("action"), body.get("payload", {}), body.get("key"), scope=client.scope, references=references
        )
    except store.KeyReused as exc:
        return problem(422, "idempotency-key-reused", "Idempotency key reused", str(exc))
    except UnstorableJSON as exc:  # a number beyond a double's range (1e400)
        return problem(400, "invalid-json", "JSON payload cannot be stored", str(exc))
    except ValueError as exc:  # bad key, unknown action, payload refused by the action
        field = exc.field if isinstance(exc, InvalidPayload) else None
        return problem(422, "invalid-message", "Invalid outbox message", str(exc), **({"field": field} if field else {}))
    return JsonResponse(message_json(result.message), status=201 if result.created else 200)
