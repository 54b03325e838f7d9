"""Views for tests/receipts/test_testing.py (@pytest.mark.urls("tests.receipts.testing_urls")):
each makes its effect by calling PROVIDER, a receipts.testing.Provider the test sets."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import receipts
from receipts.decorators import idempotent
from receipts.testing import Provider

PROVIDER: Provider | None = None


@csrf_exempt
@require_POST
@idempotent("payment.charge")
def charge(request: HttpRequest) -> JsonResponse:
    assert PROVIDER is not None
    PROVIDER(idempotency_key=receipts.current().downstream_key)
    return JsonResponse({"charged": request.POST["order"]}, status=201)


@csrf_exempt
@require_POST
def charge_every_time(request: HttpRequest) -> JsonResponse:
    """Not idempotent: every request charges, whatever its Idempotency-Key."""
    assert PROVIDER is not None
    PROVIDER()
    return JsonResponse({"charged": request.POST["order"]}, status=201)


urlpatterns = [
    path("charge", charge),
    path("charge-every-time", charge_every_time),
]
