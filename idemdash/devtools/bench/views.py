"""The views that scenarios 1, 2 and 12 compare: the same insert, bare and protected; and
scenario 12's bounds: the floor, the same insert with only what any protection must add
around it, and the replay ceiling, the least any replay from a database can do.

Both are csrf-exempt JSON endpoints, as an API view would be; neither authenticates, so
that the only difference between them is `@idempotent`.
"""

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
    """What protection that claims before the view and completes after it, in statements of
    their own and in the view's transaction, cannot avoid, and nothing else: a transaction,
    and a trivial statement where the claim and where the completion would be. A protected
    view's distance from this floor is the protection's own work (its writes, its logic)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        response = _insert(request)
        cursor.execute("SELECT 1")
    return response


@csrf_exempt
@require_POST
def replay_ceiling(request: HttpRequest) -> HttpResponse:
    """The most a replay answered from the database could ever be worth: one trivial statement
    where its look-up would be, and the insert's answer without running it. It writes no log
    line, reads no row and checks no fingerprint, so no replay that does any of those is as
    cheap; its distance from the bare insert bounds what a replay can gain over running the
    view."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    response = JsonResponse({"id": 0}, status=201)
    response["Idempotent-Replayed"] = "true"  # answered as a replay is, so the bench counts it as one
    return response
