"""POST /api/v1/outbox: enqueue a message from outside Django, with a bearer token.

Keys are scoped to the API client (like Stripe's), so two clients never collide on a
key; the key goes downstream exactly as the client sent it.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from idemdash.core.canonical import UnstorableJSON
from idemdash.core.clients import client_for_request
from idemdash.core.problems import problem
from receipts.outbox import store
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
    }


@csrf_exempt
def enqueue(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return problem(405, "method-not-allowed", "Method not allowed", "Use POST.", headers={"Allow": "POST"})
    client = client_for_request(request)
    if client is None:
        return problem(
            401,
            "unauthorized",
            "Missing or invalid bearer token",
            "Send Authorization: Bearer <token>.",
            headers={"WWW-Authenticate": 'Bearer realm="idemdash"'},
        )
    if "json" not in request.content_type:
        return problem(415, "unsupported-media-type", "Send JSON", "Content-Type must be application/json.")
    try:
        body = json.loads(request.body or b"null")
    except RequestDataTooBig:
        return problem(413, "payload-too-large", "Request body too large")
    except (ValueError, UnicodeDecodeError):
        return problem(400, "invalid-json", "Malformed JSON", "The body is not valid JSON.")
    if not isinstance(body, dict):
        return problem(400, "invalid-json", "Invalid body", 'Send an object: {"key", "action", "payload"}.')
    payload = body.get("payload", {})
    try:
        result = store.enqueue(body.get("action"), payload, body.get("key"), scope=client.scope)
    except store.KeyReused as exc:
        return problem(422, "idempotency-key-reused", "Idempotency key reused", str(exc))
    except UnstorableJSON as exc:
        return problem(400, "invalid-json", "JSON payload cannot be stored", str(exc))
    except DataError:  # a \u0000 in a string: PostgreSQL's jsonb refuses it
        return problem(400, "invalid-json", "JSON payload cannot be stored", "A string holds U+0000.")
    except ValueError as exc:  # bad key, unknown action, payload refused by the action
        return problem(422, "invalid-message", "Invalid outbox message", str(exc))
    return JsonResponse(message_json(result.message), status=201 if result.created else 200)
