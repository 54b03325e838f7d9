from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path

from receipts.models import AuditEntry


def _terminate_own_backend() -> None:
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
        _terminate_own_backend()
        AuditEntry.objects.create(created_at="2026-01-01T00:00:00Z", actor="t", action="half", object_type="x", object_id="2")
    return JsonResponse({"ok": True})


def count(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"rows": AuditEntry.objects.filter(action="half").count()})


urlpatterns = [
    path("lose-db/", write_then_lose_the_database),
    path("count/", count),
]
