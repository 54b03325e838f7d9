"""Test-only views for the fault tests (used with @pytest.mark.urls("tests.faults.urls")),
in front of the project's own URLs, so one URLconf serves the decorator, the JSON API and
the webhook receiver.

Views write AuditEntry rows (an existing model: no test-only migration) so that a test can
count what a request left behind.
"""

from asgiref.sync import sync_to_async
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Schema
from ninja.responses import Status
from rest_framework.decorators import api_view, authentication_classes
from rest_framework.response import Response

from receipts import ninja
from receipts.decorators import idempotent
from idemdash.core.models import AuditEntry

VIEW_ROW_ACTION = "faults.view_row"


def terminate_own_backend() -> None:
    """Have a second connection kill this request's PostgreSQL backend, as a failover would."""
    import psycopg

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    s = connection.settings_dict
    with psycopg.connect(dbname=s["NAME"], user=s["USER"], host=s["HOST"], port=s["PORT"] or 5432, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


def write_then_lose_the_database(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        AuditEntry.objects.create(created_at="2026-01-01T00:00:00Z", actor="t", action="half", object_type="x", object_id="1")
        terminate_own_backend()
        AuditEntry.objects.create(created_at="2026-01-01T00:00:00Z", actor="t", action="half", object_type="x", object_id="2")
    return JsonResponse({"ok": True})


def count(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"rows": AuditEntry.objects.filter(action="half").count()})


def view_row(key: str) -> AuditEntry:
    return AuditEntry.objects.create(
        created_at=timezone.now(), actor="faults", action=VIEW_ROW_ACTION, object_type="test", object_id=key
    )


@csrf_exempt
@idempotent("payment.capture")
def capture(request: HttpRequest) -> HttpResponse:
    """Writes one row, then (with `X-Fault: lose-db`, a header, so that the retry without it
    has the same fingerprint) loses its database connection before answering."""
    row = view_row(request.headers.get("Idempotency-Key", ""))
    if request.headers.get("X-Fault") == "lose-db":
        terminate_own_backend()
    return JsonResponse({"row": row.pk}, status=201)


# The same capture as each other kind of view, for the shared bad-input tests: one row, then 201.

@csrf_exempt
@idempotent("payment.capture")
async def capture_async(request: HttpRequest) -> HttpResponse:
    row = await sync_to_async(view_row)(request.headers.get("Idempotency-Key", ""))
    return JsonResponse({"row": row.pk}, status=201)


@api_view(["POST"])
@authentication_classes([])
@idempotent("payment.capture")
def capture_drf(request) -> Response:
    return Response({"row": view_row(request.headers.get("Idempotency-Key", "")).pk}, status=201)


class Captured(Schema):
    row: int


ninja_api = NinjaAPI(urls_namespace="faults-ninja")


@ninja_api.post("/capture", response={201: Captured})
@ninja.idempotent("payment.capture")
def capture_ninja(request: HttpRequest) -> Status:
    return Status(201, {"row": view_row(request.headers.get("Idempotency-Key", "")).pk})


@ninja_api.post("/capture-async", response={201: Captured})
@ninja.idempotent("payment.capture")
async def capture_ninja_async(request: HttpRequest) -> Status:
    row = await sync_to_async(view_row)(request.headers.get("Idempotency-Key", ""))
    return Status(201, {"row": row.pk})


# Every kind of view the decorator serves, by the path of its capture: hostile keys, bodies and
# headers must get the same answers from each (tests/faults/test_bad_input.py and the rest).
VIEW_KINDS = {
    "django": "/capture/",
    "django async": "/capture-async/",
    "drf": "/capture-drf/",
    "ninja": "/ninja/capture",
    "ninja async": "/ninja/capture-async",
}
ASYNC_KINDS = {"django async", "ninja async"}

urlpatterns = [
    path("lose-db/", write_then_lose_the_database),
    path("count/", count),
    path("capture/", capture),
    path("capture-async/", capture_async),
    path("capture-drf/", capture_drf),
    path("ninja/", ninja_api.urls),
    path("", include("idemdash.urls")),
]
