"""The protected view `make soak` drives: it writes its effect (a bench row labelled with its
key) in the request's transaction and, when asked, enqueues an outbox message posting to the
soak's receiver."""

from __future__ import annotations

import os
import random
import time

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from idemdash.devtools.bench.models import BenchRow
from receipts.decorators import idempotent
from receipts.outbox.store import enqueue

SCOPE = "soak"
OPERATION = "soak.effect"


def view_label(key: str) -> str:
    return f"v:{key}"


def event_label(event_id: str) -> str:
    return f"e:{event_id}"


def outbox_key(key: str) -> str:
    return f"out:{key}"


@csrf_exempt
@require_POST
@idempotent(OPERATION, scope=lambda request: SCOPE)
def effect(request: HttpRequest) -> HttpResponse:
    key = request.headers["Idempotency-Key"]
    row = BenchRow.objects.create(label=view_label(key))
    # The view's own work after its write, as a real view has: 20 to 80 ms inside the
    # transaction, where most of the fault thread's kills of web workers then land.
    time.sleep(random.uniform(0.02, 0.08))
    if request.GET.get("outbox"):
        enqueue("http.post", {"url": os.environ["SOAK_RECEIVER_URL"] + "/soak", "json": {"key": key}}, outbox_key(key))
    return JsonResponse({"row": row.pk, "pid": os.getpid()}, status=201)
