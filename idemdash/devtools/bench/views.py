"""The two views that scenario 1 compares: the same insert, bare and protected.

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
