"""The views that scenarios 1, 2 and 12 compare: the same insert, bare and protected, and
scenario 12's bounds, the floor and the replay ceiling. All are csrf-exempt JSON endpoints that
do not authenticate, so that the only difference between them is `@idempotent`."""

from __future__ import annotations

from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from idemdash.devtools.bench.models import BenchRow
from receipts.decorators import idempotent

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
@idempotent("bench.insert", scope=lambda request: SCOPE)  # one scope: the bench deletes it between runs
def insert_protected(request: HttpRequest) -> HttpResponse:
    return _insert(request)


@csrf_exempt
@require_POST
def insert_floor(request: HttpRequest) -> HttpResponse:
    """What any protection claiming before the view and completing after it cannot avoid: a
    transaction, and a trivial statement where the claim and where the completion would be."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        response = _insert(request)
        cursor.execute("SELECT 1")
    return response


@csrf_exempt
@require_POST
def replay_ceiling(request: HttpRequest) -> HttpResponse:
    """The cheapest replay from a database: one trivial statement where its look-up would be and
    the insert's answer, no log line, no row read, no fingerprint checked."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    response = JsonResponse({"id": 0}, status=201)
    response["Idempotent-Replayed"] = "true"  # answered as a replay is, so the bench counts it as one
    return response
