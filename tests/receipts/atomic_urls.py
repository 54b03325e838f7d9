"""The protected views tests/receipts/test_atomic_requests.py serves under ATOMIC_REQUESTS:
each writes its side effect as a row in the request's own transaction, and holds it open a
while so that the duplicates arrive while the first attempt runs."""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt

from receipts.decorators import idempotent
from tests.receipts.urls import side_effect


def _side_effect(request: HttpRequest):
    return side_effect(request.headers["Idempotency-Key"])


@csrf_exempt
@idempotent("email.send")
def capture(request: HttpRequest) -> HttpResponse:
    row = _side_effect(request)
    time.sleep(0.3)
    return JsonResponse({"row": row.pk}, status=201)


@csrf_exempt
@idempotent("email.send")
def explode(request: HttpRequest) -> HttpResponse:
    _side_effect(request)
    raise RuntimeError("boom")


urlpatterns = [path("capture", capture), path("explode", explode), path("", include("idemdash.urls"))]
