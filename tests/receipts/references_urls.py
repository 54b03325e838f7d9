"""Test-only views that refer to what they work on and enqueue an outbox message (used with
@pytest.mark.urls("tests.receipts.references_urls"))."""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

import receipts
from receipts.decorators import idempotent
from receipts.outbox import store as outbox

URL = "http://127.0.0.1:9/hook"


def _charge(request: HttpRequest) -> str:
    charge = json.loads(request.body)["charge"]
    receipts.current().refer("stripe.charge", charge)
    outbox.enqueue("http.post", {"url": URL, "json": {"charge": charge}}, f"notify-{charge}")
    return charge


@csrf_exempt
@idempotent("payments.charge", scope=lambda request: "test")
def charge(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"charge": _charge(request)}, status=201)


@csrf_exempt
@idempotent("payments.charge", scope=lambda request: "test")
def charge_then_502(request: HttpRequest) -> JsonResponse:
    _charge(request)
    return JsonResponse({"error": "gateway timeout after the charge"}, status=502)


urlpatterns = [
    path("charge", charge),
    path("charge-then-502", charge_then_502),
]
