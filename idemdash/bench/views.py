"""The two views that scenario 1 compares: the same insert, bare and protected.

Both are csrf-exempt JSON endpoints, as an API view would be; neither authenticates, so
that the only difference between them is the idempotency layer.
"""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from idemdash.bench.models import BenchRow
from receipts import store
from receipts.fingerprint import fingerprint_http
from receipts.problems import problem

SCOPE = "bench"


def _insert(request: HttpRequest) -> JsonResponse:
    row = BenchRow.objects.create(label=request.headers.get("Idempotency-Key", "")[:64])
    return JsonResponse({"id": row.pk}, status=201)


@csrf_exempt
@require_POST
def insert_bare(request: HttpRequest) -> HttpResponse:
    return _insert(request)


@csrf_exempt
@require_POST
def insert_protected(request: HttpRequest) -> HttpResponse:
    # Stand-in for @idempotent("bench.insert") until the decorator lands: the same store
    # calls a decorator makes (claim; run; complete or replay).
    key = request.headers.get("Idempotency-Key", "")
    try:
        store.validate_key(key)
    except store.InvalidKey as exc:
        return problem(400, "invalid-idempotency-key", "Invalid Idempotency-Key", str(exc))
    fp = fingerprint_http(request.method, request.path, request.body, request.content_type)
    result = store.claim(SCOPE, key, "bench.insert", fingerprint=fp)
    if result.owned:
        response = _insert(request)
        store.complete(
            SCOPE, key, result.token,
            response_status=response.status_code,
            content_type=response["Content-Type"],
            body=response.content.decode(),
        )
        return response
    receipt = result.receipt
    if result.outcome == store.Outcome.REPLAYED:
        replay = HttpResponse(
            receipt.response_body, status=receipt.response_status or 200,
            content_type=receipt.response_content_type or "application/json",
        )
        replay["Idempotent-Replayed"] = "true"
        return replay
    if result.outcome == store.Outcome.IN_PROGRESS:
        return problem(409, "idempotency-key-in-use", "Request in progress", json.dumps(key))
    return problem(422, "idempotency-key-reused", "Idempotency-Key reused", "Different request body.")
