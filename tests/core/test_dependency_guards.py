"""Every private or undocumented API of a dependency that runtime code relies on, exercised
the way that code uses it (docs/architecture.md, sections 5 and 11).

An upgrade that moves one of them fails here with the dependency, its installed version,
what changed and which of our modules to check, rather than somewhere downstream (or only
on PostgreSQL, or not at all). The django-q2 internals of idemdash/worker/cluster.py have
their own such test, tests/idemdash/test_worker_cluster.py. Tests that need PostgreSQL are
marked `postgres` and skip on SQLite.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
from collections.abc import Iterator
from datetime import timedelta
from importlib.metadata import version

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.http import HttpResponse  # Ninja resolves a string annotation in the module
from django.test.utils import CaptureQueriesContext


@contextlib.contextmanager
def pinned(dependency: str, what: str, relied_on_by: str) -> Iterator[None]:
    """Turn any failure inside into one that names the dependency and its version."""
    try:
        yield
    except Exception as exc:  # an AssertionError, or the internal is gone (AttributeError, ImportError...)
        pytest.fail(
            f"{dependency} {version(dependency)} changed {what}, which {relied_on_by} relies on: "
            f"check that module against this version ({type(exc).__name__}: {exc})"
        )


# --- Django's and psycopg's cursors: the prepared statements of the fast path -------------


@pytest.fixture
def persistent_connection(monkeypatch):
    """What the prepared cursor needs: a persistent connection allowing prepared statements."""
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", 5)


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.postgres
@pytest.mark.django_db
def test_djangos_cursor_wrapper_runs_the_server_binding_cursor_put_into_it(persistent_connection):
    from idemdash.core import pg

    with pinned(
        "Django",
        "ServerBindingCursor, CursorWrapper.cursor or BaseDatabaseWrapper._cursor's steps "
        "(close_if_health_check_failed, ensure_connection, wrap_database_errors, _prepare_cursor)",
        "idemdash/core/pg.py:cursor",
    ):
        from django.db.backends.postgresql.base import ServerBindingCursor

        with pg.cursor() as wrapper:
            # The wrapper keeps its database cursor in `.cursor` and runs statements on it.
            assert isinstance(wrapper.cursor, ServerBindingCursor)
            wrapper.execute("SELECT %s::int + 1 AS guard_swapped", [41])
            assert wrapper.fetchone() == (42,)
        # Django's error translation still applies to the swapped cursor.
        from django.db import ProgrammingError

        with pytest.raises(ProgrammingError), transaction.atomic():
            with pg.cursor() as wrapper:
                wrapper.execute("SELECT guard_no_such_column")


@pytest.mark.postgres
@pytest.mark.django_db
def test_psycopgs_execute_prepares_on_the_server_when_asked(persistent_connection):
    from idemdash.core import pg

    with pinned("psycopg", "Cursor.execute(prepare=True)", "idemdash/core/pg.py:_prepared_cursor_class"):
        import psycopg

        assert "prepare" in inspect.signature(psycopg.Cursor.execute).parameters
        with pg.cursor() as wrapper:
            wrapper.execute("SELECT %s::int AS guard_prepared", [1])
        assert any("guard_prepared" in statement for statement in _prepared_statements())


@pytest.mark.postgres
@pytest.mark.django_db
def test_djangos_query_log_reads_the_query_the_prepared_cursor_records(persistent_connection):
    from idemdash.core import pg

    with pinned(
        "psycopg",
        "Cursor._query or Cursor._convert_query (what Django's query log reads)",
        "idemdash/core/pg.py:_prepared_cursor_class",
    ):
        with CaptureQueriesContext(connection) as queries:
            with pg.cursor() as wrapper:
                assert wrapper.cursor.logged  # connection.queries_logged, read when it was swapped in
                wrapper.execute("SELECT %s::int AS guard_logged", [7])
        logged = queries.captured_queries[-1]["sql"]
        assert logged is not None and "guard_logged" in logged


def test_the_database_wrapper_names_its_driver_module():
    from idemdash.core import pg

    with pinned("Django", "DatabaseWrapper.Database", "idemdash/core/pg.py:usable"):
        driver = type(connections[DEFAULT_DB_ALIAS]).Database  # a class attribute: no connection needed
        assert inspect.ismodule(driver)
        if connection.vendor == "postgresql":
            assert driver.__name__ == "psycopg"  # this project installs psycopg 3
        assert pg.usable() == (connection.vendor == "postgresql")


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_fields_converters_turn_a_raw_row_into_what_the_orm_loads():
    from receipts import store
    from receipts.models import Receipt

    with pinned("Django", "Field.get_db_converters or Model.from_db", "receipts/pg.py:claim_or_replay"):
        claimed = store.claim("client:guards", "k", "email.send", {"to": "a@example.com", "n": [1, 2]})
        fields = Receipt._meta.concrete_fields
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {', '.join(f.column for f in fields)} FROM receipts_receipt WHERE id = %s",
                [claimed.receipt.pk],
            )
            values = list(cursor.fetchone())
        for i, field in enumerate(fields):
            for convert in field.get_db_converters(connection):
                values[i] = convert(values[i], None, connection)
        built = Receipt.from_db(connection.alias, [f.attname for f in fields], values)
        loaded = Receipt.objects.get(pk=claimed.receipt.pk)
        assert [getattr(built, f.attname) for f in fields] == [getattr(loaded, f.attname) for f in fields]
        assert not built._state.adding and built._state.db == connection.alias


@pytest.mark.django_db(transaction=True)
def test_the_connection_says_whether_it_is_inside_a_transaction():
    with pinned("Django", "BaseDatabaseWrapper.in_atomic_block", "receipts/pg.py and webhooks/pg.py"):
        assert connection.in_atomic_block is False
        with transaction.atomic():
            assert transaction.get_connection().in_atomic_block is True


# --- Django's delete collector, bypassed by retention ------------------------------------


def _audit_entries(n: int) -> None:
    from django.utils import timezone

    from idemdash.core.models import AuditEntry

    now = timezone.now()
    AuditEntry.objects.bulk_create(
        AuditEntry(created_at=now, actor="guard", action="guard", object_type="guard", object_id=str(i)) for i in range(n)
    )


@pytest.mark.django_db
def test_raw_delete_deletes_in_one_statement_without_the_collector():
    from idemdash.core.models import AuditEntry

    _audit_entries(3)
    with pinned("Django", "QuerySet._raw_delete", "idemdash/core/retention.py:delete_rows"):
        rows = AuditEntry.objects.filter(actor="guard", object_id__in=["0", "1"])
        with CaptureQueriesContext(connection) as queries:
            assert rows._raw_delete(rows.db) == 2
        assert len(queries.captured_queries) == 1
        assert queries.captured_queries[0]["sql"].lstrip().upper().startswith("DELETE")
        assert list(AuditEntry.objects.filter(actor="guard").values_list("object_id", flat=True)) == ["2"]


def test_the_relations_a_delete_must_settle_are_listed_with_their_on_delete():
    from django.db.models import CASCADE, DO_NOTHING, SET_NULL
    from webhooks.models import WebhookDelivery, WebhookEvent

    from receipts.models import Attempt, Receipt
    from receipts.outbox.models import OutboxAttempt, OutboxMessage

    with pinned("Django", "django.db.models.deletion.get_candidate_relations_to_delete", "idemdash/core/retention.py:delete_rows"):
        from django.db.models.deletion import get_candidate_relations_to_delete

        def relations(model) -> dict:
            return {
                (r.related_model, r.field.name): r.field.remote_field.on_delete
                for r in get_candidate_relations_to_delete(model._meta)
            }

        assert relations(Receipt)[(Attempt, "receipt")] is DO_NOTHING
        assert relations(WebhookEvent)[(WebhookDelivery, "event")] is CASCADE
        assert relations(OutboxMessage)[(OutboxAttempt, "message")] is SET_NULL
        # Each relation's field is the dependent's foreign key, filterable by its target.
        relation = next(r for r in get_candidate_relations_to_delete(WebhookEvent._meta) if r.related_model is WebhookDelivery)
        assert relation.field.target_field.attname == "id"


def test_the_deletes_that_need_the_collector_can_still_be_told_apart():
    from django.contrib.contenttypes.fields import GenericRelation
    from django.db.models import signals

    from idemdash.core.models import AuditEntry

    with pinned(
        "Django",
        "Signal.has_listeners or GenericRelation.bulk_related_objects",
        "idemdash/core/retention.py:_settles_in_sql",
    ):
        # A generic relation is a private field that the collector follows by this method.
        assert callable(GenericRelation.bulk_related_objects)

        def listener(**kwargs) -> None: ...

        assert not signals.post_delete.has_listeners(AuditEntry)
        signals.post_delete.connect(listener, sender=AuditEntry)
        try:
            assert signals.post_delete.has_listeners(AuditEntry)
        finally:
            signals.post_delete.disconnect(listener, sender=AuditEntry)


@pytest.mark.django_db
def test_the_compiled_select_of_a_queryset_runs_inside_our_own_statement():
    from idemdash.core.models import AuditEntry

    _audit_entries(2)
    with pinned("Django", "SQLCompiler.as_sql (query.get_compiler)", "receipts/archive.py:archive_financial_receipts"):
        rows = AuditEntry.objects.filter(actor="guard").order_by().values_list("pk", "object_id", "created_at")
        select, params = rows.query.get_compiler(using=rows.db).as_sql()
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT copied.* FROM ({select}) copied", params)
            got = sorted(row[:2] for row in cursor.fetchall())
        assert got == sorted(row[:2] for row in rows)


@pytest.mark.django_db
def test_a_querysets_sql_with_params_runs_as_is():
    from idemdash.core.models import AuditEntry

    _audit_entries(2)
    with pinned("Django", "Query.sql_with_params", "idemdash/dashboard/queries.py:_planner_rows"):
        qs = AuditEntry.objects.filter(actor="guard")
        sql, params = qs.values("pk").query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            assert sorted(row[0] for row in cursor.fetchall()) == sorted(qs.values_list("pk", flat=True))


# --- django-q2: the task written with its event ------------------------------------------


def test_async_task_hands_the_signed_package_to_the_broker_it_is_given():
    from webhooks import processing

    with pinned("django-q2", "async_task(broker=) or SignedPackage.loads", "webhooks/processing.py:delivery_task"):
        from django_q.signing import SignedPackage

        queue, package = processing.delivery_task(7, "evt_guard", "")
        assert isinstance(package, str)
        task = SignedPackage.loads(package)
        assert (task["func"], task["args"], task["group"]) == (processing.TASK_BY_KEY, (7, "evt_guard"), "webhooks")

        class Broker:  # what the stand-in must offer: enqueue(package) and list_key
            list_key = "guard"
            packages: list[str] = []

            def enqueue(self, package: str) -> str:
                self.packages.append(package)
                return "guard-id"

        from django_q.tasks import async_task

        broker = Broker()
        async_task(processing.TASK_BY_KEY, 1, "k", group="webhooks", broker=broker)
        assert len(broker.packages) == 1 and SignedPackage.loads(broker.packages[0])["args"] == (1, "k")


@pytest.mark.django_db
def test_the_cluster_configuration_is_read_where_we_read_it():
    from django.conf import settings

    with pinned("django-q2", "Conf.CLUSTER_NAME, Conf.ORM or Conf.SYNC", "webhooks/processing.py:_orm_broker_in_this_database"):
        from django_q.brokers import get_broker
        from django_q.conf import Conf

        assert Conf.CLUSTER_NAME == settings.Q_CLUSTER["name"]
        assert Conf.ORM == settings.Q_CLUSTER.get("orm")
        assert Conf.SYNC is False
        # The queue the ORM broker reads by default: what _KeptPackage names.
        assert get_broker().list_key == Conf.CLUSTER_NAME


@pytest.mark.django_db
def test_the_orm_broker_dequeues_a_row_written_as_its_enqueue_writes_it():
    from django.utils import timezone

    from webhooks import processing

    with pinned("django-q2", "OrmQ's columns (key, payload, lock) or the ORM broker's enqueue", "webhooks/pg.py:_store_sql"):
        from django_q.brokers import get_broker
        from django_q.brokers.orm import ORM
        from django_q.models import OrmQ
        from django_q.signing import SignedPackage

        broker = get_broker()
        assert isinstance(broker, ORM)
        # Our statement names these columns.
        assert [OrmQ._meta.get_field(name).column for name in ("key", "payload", "lock")] == ["key", "payload", "lock"]

        before = timezone.now()
        queue, package = processing.delivery_task(7, "evt_guard", "")
        enqueued = OrmQ.objects.get(pk=broker.enqueue(package))
        assert (enqueued.key, enqueued.payload) == (queue, package)
        assert before <= enqueued.lock <= timezone.now()  # lock = now: due at once
        enqueued.delete()

        # A row written as our statement writes it is handed to a worker.
        OrmQ.objects.create(key=queue, payload=package, lock=timezone.now() - timedelta(microseconds=1))
        (_, payload), = broker.dequeue()
        assert SignedPackage.loads(payload)["args"] == (7, "evt_guard")


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_orm_broker_dequeues_the_task_our_statement_writes_with_its_event():
    from tests.webhooks.conftest import make_endpoint
    from webhooks.receive import store_delivery
    from webhooks.verify import VerifiedDelivery

    endpoint = make_endpoint("guard", "stripe", "whsec_guard_0000000000000000")
    store_delivery(endpoint, VerifiedDelivery(0, {"id": "evt_guard"}, "evt_guard", "a.b", "evt_guard", ""))
    with pinned("django-q2", "the ORM broker's dequeue of a row in OrmQ", "webhooks/pg.py:_store_sql"):
        from django_q.brokers import get_broker
        from django_q.signing import SignedPackage

        (_, payload), = get_broker().dequeue()
        assert SignedPackage.loads(payload)["args"] == (endpoint.pk, "evt_guard")


# --- Django's request: the chunked-body middleware ---------------------------------------


def test_a_wsgi_request_reads_its_body_from_a_replaced_limited_stream():
    from django.test import RequestFactory

    from receipts import middleware

    with pinned("Django", "WSGIRequest._stream or LimitedStream", "receipts/middleware.py:_buffer_body"):
        body = b"a=1&b=" + b"x" * 70_000  # more than one READ_STEP
        # What a WSGI server that took the chunking off hands Django: no Content-Length.
        environ = {"wsgi.input": io.BytesIO(body), "CONTENT_TYPE": "application/x-www-form-urlencoded"}
        request = RequestFactory().generic("POST", "/", HTTP_TRANSFER_ENCODING="chunked", **environ)
        assert "CONTENT_LENGTH" not in request.META
        middleware._buffer_body(request)
        assert request.body == body
        assert request.POST["a"] == "1" and len(request.POST["b"]) == 70_000


# --- Django's method_decorator, and DRF's views: the decorator's refusals and rendering --


def test_method_decorator_passes_a_partial_over_the_bound_method():
    from django.utils.decorators import method_decorator
    from django.views import View

    seen = []

    def spy(view):
        seen.append(view)
        return view

    @method_decorator(spy, name="dispatch")
    class Spied(View):
        def get(self, request):
            return None

    instance = Spied()
    with pinned("Django", "method_decorator's bound method", "receipts/placement.py:refuse_dispatch"):
        Spied.dispatch(instance, _get_request())
        # (The first call was Django's, at class creation, to copy attributes from a dummy.)
        assert isinstance(seen[-1], functools.partial) and seen[-1].func.__self__ is instance


def _get_request():
    from django.test import RequestFactory

    return RequestFactory().get("/")


def test_drf_marks_its_views_with_their_class():
    from rest_framework.decorators import api_view
    from rest_framework.views import APIView

    with pinned("djangorestframework", "APIView.as_view's view.cls and view.initkwargs", "receipts/placement.py:refuse_view"):
        view = APIView.as_view()
        assert view.cls is APIView and view.initkwargs == {}
        function_view = api_view(["POST"])(lambda request: None)
        assert hasattr(function_view, "cls") and hasattr(function_view, "initkwargs")
        assert hasattr(APIView, "initialize_request")  # how a bound dispatch is told apart


def test_a_drf_handler_can_render_its_response_before_drf_does():
    from rest_framework.response import Response
    from rest_framework.test import APIRequestFactory
    from rest_framework.views import APIView

    rendered = []

    class Guarded(APIView):
        authentication_classes: list = []
        permission_classes: list = []

        def post(self, request):
            view = request.parser_context["view"]
            response = view.finalize_response(request, Response({"ok": True}, status=201))
            response.render()
            rendered.append((view is self, response.content))
            return response

    with pinned(
        "djangorestframework",
        'Request.parser_context["view"] or APIView.finalize_response',
        "receipts/decorators.py:_rendered",
    ):
        response = Guarded.as_view()(APIRequestFactory().post("/", {}, format="json"))
        assert rendered == [(True, b'{"ok":true}')]
        # DRF finalises and renders again after the handler; the body stays the one stored.
        assert response.status_code == 201 and response.content == b'{"ok":true}'


# --- Django Ninja: receipts/ninja.py ----------------------------------------------------


def test_ninja_calls_a_functions_hooks_with_its_operation_and_marks_the_function():
    from ninja import NinjaAPI
    from ninja.decorators import decorate_view

    seen = []
    api = NinjaAPI(urls_namespace="guard-hooks")

    def view(request):
        return {}

    view._ninja_contribute_to_operation = [seen.append]
    decorate_view(lambda run: seen.append(run) or (lambda request, **kw: run(request, **kw)))(view)
    with pinned(
        "django-ninja",
        "the _ninja_contribute_to_operation hooks, decorate_view on Operation.run or _ninja_operation",
        "receipts/ninja.py:idempotent and receipts/placement.py:refuse_ninja",
    ):
        api.post("/x")(view)
        operation = view._ninja_operation
        assert seen[0] is operation and seen[1].__self__ is operation
        assert getattr(operation.run, "__self__", None) is None  # wrapped, no longer the method


def test_ninja_renders_a_result_through_the_operations_schema_and_temporal_response():
    from django.test import RequestFactory
    from ninja import NinjaAPI, Schema
    from ninja.responses import Status

    class Out(Schema):
        n: int

    from ninja.decorators import decorate_view

    api = NinjaAPI(urls_namespace="guard-render")
    bound = []

    @api.post("/x", response={201: Out})
    @decorate_view(lambda run: bound.append(run.__self__) or run)
    def view(request, response: HttpResponse):
        return Status(201, {"n": 1, "dropped": 2})

    with pinned(
        "django-ninja",
        "Operation._result_to_response, signature.response_arg or api.create_temporal_response",
        "receipts/ninja.py:_render",
    ):
        api.urls  # noqa: B018 - binds a copy of each operation to the api, its run wrapped again
        operation = bound[-1]
        assert operation is not view._ninja_operation and operation.api is api
        request = RequestFactory().post("/x")
        assert operation.signature.response_arg == "response"
        temporal = api.create_temporal_response(request)
        temporal["X-Set"] = "1"
        rendered = operation._result_to_response(request, Status(201, {"n": 1, "dropped": 2}), temporal)
        assert (rendered.status_code, rendered.content, rendered["X-Set"]) == (201, b'{"n": 1}', "1")


# --- httpx and httpcore: the outbox's fence ----------------------------------------------


def test_the_transports_pool_opens_connections_through_its_network_backend():
    import httpcore
    import httpx

    class Refusing(httpcore.NetworkBackend):
        asked: list[tuple[str, int]] = []

        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            self.asked.append((host, port))
            raise httpcore.ConnectError("refused by the guard")

    with pinned("httpx", "HTTPTransport._pool", "receipts/outbox/fence.py:FencedTransport"):
        transport = httpx.HTTPTransport()
        assert isinstance(transport._pool, httpcore.ConnectionPool)
    with pinned("httpcore", "ConnectionPool._network_backend", "receipts/outbox/fence.py:FencedTransport"):
        transport._pool._network_backend = Refusing()
        with httpx.Client(transport=transport) as client, pytest.raises(httpx.ConnectError, match="refused by the guard"):
            client.get("http://guard.invalid:8125/")
        assert Refusing.asked == [("guard.invalid", 8125)]


# --- Management commands and static files ------------------------------------------------


def test_a_commands_output_wrapper_keeps_the_stream_it_wraps():
    from django.core.management.base import BaseCommand

    stream = io.StringIO()
    with pinned("Django", "OutputWrapper._out", "receipts/management/commands/purge.py (its progress bar)"):
        assert BaseCommand(stderr=stream).stderr._out is stream


def test_collectstatic_places_a_finders_files_under_its_storage_prefix(tmp_path, settings):
    from django.contrib.staticfiles import finders
    from django.core.management import call_command

    with pinned("plotly", "the location of plotly.min.js in its package", "idemdash/dashboard/vendor.py"):
        from idemdash.dashboard import vendor

        assert (vendor.PACKAGE_DATA / "plotly.min.js").is_file()

    settings.STATIC_ROOT = str(tmp_path)
    settings.STATICFILES_FINDERS = ["idemdash.dashboard.vendor.PlotlyFinder"]
    finders.get_finder.cache_clear()
    try:
        with pinned("Django", "collectstatic's use of a finder storage's `prefix`", "idemdash/dashboard/vendor.py:PlotlyFinder"):
            call_command("collectstatic", interactive=False, verbosity=0)
            assert (tmp_path / "vendor" / "plotly.min.js").is_file()
    finally:
        finders.get_finder.cache_clear()


@pytest.mark.django_db
def test_the_authentication_middleware_keeps_the_user_it_looked_up_where_the_observer_reads_it(rf):
    from asgiref.sync import async_to_sync
    from django.contrib.auth.middleware import AuthenticationMiddleware
    from django.contrib.sessions.middleware import SessionMiddleware

    with pinned("Django", "AuthenticationMiddleware's _cached_user and _acached_user", "receipts/keys.py:known_caller"):
        request = rf.get("/")
        SessionMiddleware(lambda r: None).process_request(request)
        AuthenticationMiddleware(lambda r: None).process_request(request)
        assert "_cached_user" not in request.__dict__ and "_acached_user" not in request.__dict__
        looked_up = async_to_sync(request.auser)()
        assert request.__dict__["_acached_user"] is looked_up
        request.user.is_authenticated  # noqa: B018 -- the sync look
        assert request.__dict__["_cached_user"] is request.user._wrapped
