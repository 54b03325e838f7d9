"""The views that scenarios 1, 2 and 11 compare: the same insert, bare, protected, and protected
in single-transaction mode (claim, insert and completion committed together).

Both are csrf-exempt JSON endpoints, as an API view would be; neither authenticates, so
that the only difference between them is `@idempotent`.
"""

from __future__ import annotations

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
@idempotent("bench.insert.single", scope=lambda request: SCOPE, single_transaction=True)
def insert_protected_single(request: HttpRequest) -> HttpResponse:
    return _insert(request)
