"""Views in single-transaction mode (docs/http-contract.md: One transaction per request), for
tests/receipts/test_single_transaction.py: in process (@pytest.mark.urls) and under a real
gunicorn (single_transaction_settings). Each writes its side effect as a row in the request's
own transaction; `hold` can make it wait while another connection looks, and `pid_file`
tells a test which worker to kill mid-view."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt

from receipts.decorators import idempotent
from tests.receipts.urls import side_effect

# Set by an in-process test to run code inside the view, after its write.
hooks: dict[str, Callable[[], None]] = {}


def _effect(request: HttpRequest) -> HttpResponse:
    key = request.headers["Idempotency-Key"]
    row = side_effect(key)
    if "hold" in hooks:
        hooks["hold"]()
    if "sleep" in request.GET:
        time.sleep(float(request.GET["sleep"]))
    if "pid_file" in request.GET:
        # The kill test: this worker has written its effect and not committed it.
        with open(request.GET["pid_file"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(30)
    if "explode" in request.GET:
        raise RuntimeError("boom")
    # `status` answers for the request instead of its query string, so a retry can be the same request.
    status = hooks["status"]() if "status" in hooks else int(request.GET.get("status", "201"))
    return JsonResponse({"row": row.pk}, status=status)


@csrf_exempt
@idempotent("email.send", single_transaction=True)
def by_decorator(request: HttpRequest) -> HttpResponse:
    return _effect(request)


@csrf_exempt
@idempotent("ledger.post")  # single_transaction by RECEIPTS_OPERATIONS, where a test sets it
def by_policy(request: HttpRequest) -> HttpResponse:
    return _effect(request)


@csrf_exempt
@idempotent("email.send", single_transaction=True)
async def by_decorator_async(request: HttpRequest) -> HttpResponse:
    from asgiref.sync import sync_to_async

    return await sync_to_async(_effect)(request)


urlpatterns = [
    path("single", by_decorator),
    path("single-policy", by_policy),
    path("single-async", by_decorator_async),
    path("", include("idemdash.urls")),
]
