"""Test-only views behind @idempotent (used with @pytest.mark.urls("tests.receipts.urls")).

The side effect every view counts is an AuditEntry row with action "test.side_effect":
an existing model, so no test-only migration is needed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import include, path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from receipts.decorators import idempotent
from idemdash.core.models import AuditEntry

# Set by a test to run code inside the view, after its write and before completion.
hooks: dict[str, Callable[[], None]] = {}


def _side_effect_row(key: str, detail: str) -> dict:
    return {
        "created_at": timezone.now(),
        "actor": "test-view",
        "action": "test.side_effect",
        "object_type": "test",
        "object_id": key,
        "detail": detail,
    }


def side_effect(key: str, detail: str = "") -> AuditEntry:
    return AuditEntry.objects.create(**_side_effect_row(key, detail))


async def aside_effect(key: str, detail: str = "") -> AuditEntry:
    """The side effect as an async view writes it: Django's async ORM."""
    return await AuditEntry.objects.acreate(**_side_effect_row(key, detail))


def _status_from(request: HttpRequest) -> int:
    return int(request.GET.get("status", "201"))


def _row_created(request: HttpRequest, key_if_none: str = "") -> HttpResponse:
    """The plain 201: one side-effect row under the request's key, its id in the body."""
    row = side_effect(request.headers.get("Idempotency-Key", key_if_none))
    return JsonResponse({"row": row.pk}, status=201)


@csrf_exempt
@idempotent("payment.capture")
def capture(request: HttpRequest) -> HttpResponse:
    """Writes a row, then answers ?status= (default 201) with a JSON body."""
    row = side_effect(request.headers.get("Idempotency-Key", ""), request.body.decode("utf-8", "replace"))
    if "sleep" in request.GET:
        time.sleep(float(request.GET["sleep"]))
    if "hook" in hooks:
        hooks["hook"]()
    status = _status_from(request)
    return JsonResponse({"row": row.pk, "status": status}, status=status)


@csrf_exempt
@idempotent("email.send", required=False)
def optional(request: HttpRequest) -> HttpResponse:
    return _row_created(request, key_if_none="none")


@csrf_exempt
@idempotent("ledger.post")
def explode(request: HttpRequest) -> HttpResponse:
    side_effect(request.headers.get("Idempotency-Key", ""))
    raise RuntimeError("ledger unreachable")


@csrf_exempt
@idempotent("email.send")
def missing(request: HttpRequest) -> HttpResponse:
    side_effect(request.headers.get("Idempotency-Key", ""))
    raise Http404("no such order")


@csrf_exempt
@idempotent("email.send")
def stream(request: HttpRequest) -> HttpResponse:
    side_effect(request.headers.get("Idempotency-Key", ""))
    return StreamingHttpResponse(iter([b"a", b"b"]), content_type="text/plain")


@csrf_exempt
@idempotent("email.send")
def binary(request: HttpRequest) -> HttpResponse:
    side_effect(request.headers.get("Idempotency-Key", ""))
    return HttpResponse(bytes([0, 255, 254, 1]), content_type="application/octet-stream")


@csrf_exempt
@idempotent("email.send")
def redirect(request: HttpRequest) -> HttpResponse:
    row = side_effect(request.headers.get("Idempotency-Key", ""))
    response = HttpResponse(status=303)
    response["Location"] = f"/done/{row.pk}"
    return response


@csrf_exempt
@idempotent("email.send")
def headers(request: HttpRequest) -> HttpResponse:
    """Every kind of header: the result's own, one connection's, one moment's, a cookie."""
    row = side_effect(request.headers.get("Idempotency-Key", ""))
    response = JsonResponse({"row": row.pk}, status=201)
    response["ETag"] = f'"row-{row.pk}"'
    response["X-Row"] = str(row.pk)
    response["Cache-Control"] = "no-store"
    response["Link"] = f'</rows/{row.pk}>; rel="self"'
    response["X-Request-Id"] = request.headers.get("X-Request-Id", "")
    response["Date"] = "Wed, 25 Nov 2026 12:00:00 GMT"
    response["Connection"] = "keep-alive, X-Hop"
    response["X-Hop"] = "1"
    response["Keep-Alive"] = "timeout=5"
    response["Transfer-Encoding"] = "identity"
    response["Set-Cookie"] = "raw=1"
    response.set_cookie("session-ish", "first-caller")
    return response


@idempotent("profile.update")
def session_view(request: HttpRequest) -> HttpResponse:
    """No csrf_exempt: the CSRF middleware must still guard it."""
    row = side_effect(request.headers.get("Idempotency-Key", ""))
    return JsonResponse({"row": row.pk, "user": request.user.pk}, status=201)


@csrf_exempt
@idempotent("email.send", scope=lambda request: "tenant:" + request.headers.get("X-Tenant", "none"))
def tenant(request: HttpRequest) -> HttpResponse:
    return _row_created(request)


@csrf_exempt
@idempotent("email.send")
def echo(request: HttpRequest) -> HttpResponse:
    """Safe methods pass through; unsafe ones write."""
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        side_effect(request.headers.get("Idempotency-Key", ""))
    return JsonResponse({"method": request.method, "body": json.loads(request.body or b"null")})


urlpatterns = [
    path("capture", capture),
    path("optional", optional),
    path("explode", explode),
    path("missing", missing),
    path("stream", stream),
    path("binary", binary),
    path("redirect", redirect),
    path("headers", headers),
    path("session", session_view),
    path("tenant", tenant),
    path("echo", echo),
    path("api/v1/receipts/", include("receipts.urls")),
]
