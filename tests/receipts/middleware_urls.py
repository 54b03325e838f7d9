"""A view whose database connection fails for real (used with
@pytest.mark.urls("tests.receipts.middleware_urls")), under any path."""

from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.urls import re_path


def lose_the_database(request: HttpRequest) -> HttpResponse:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # The server ends this backend, as a failover or restart would.
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            cursor.execute("SELECT 1")
        elif connection.vendor == "mysql":
            # The server ends this connection (MySQL/MariaDB's KILL), as a restart would.
            cursor.execute("KILL CONNECTION_ID()")
        else:
            # SQLite cannot lose a connection; a missing table is its OperationalError.
            cursor.execute("SELECT * FROM receipts_gone_table")
    return HttpResponse("unreachable")


urlpatterns = [re_path(r"^.*$", lose_the_database)]
