"""One view of each kind behind the Idempotency-Key contract, placed as "Each kind of view"
in docs/http-contract.md says (used with @pytest.mark.urls("tests.receipts.view_kinds_urls")).

Every view writes the side effect of tests.receipts.urls, then answers with the JSON (or
text) `{"row": ..., "user": ...}`. The DRF views authenticate with DRF's own classes:
SessionAuthentication, and BearerNameAuthentication, a stand-in for JWT whose tokens are
`Bearer jwt.<username>` (a bearer token that is not an idemdash token).
"""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.template import engines
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Schema
from ninja.responses import Status, codes_2xx, codes_4xx, codes_5xx
from rest_framework import exceptions, status, viewsets
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.decorators import api_view, authentication_classes
from rest_framework.response import Response
from rest_framework.views import APIView

from idemdash.core.audit import AuditEntry
from receipts import drf, ninja
from receipts.decorators import idempotent
from tests.receipts.urls import aside_effect, hooks, side_effect

PAGE = engines["django"].from_string("<p>row {{ row }} for {{ user }}</p>\n")


def _effect(request: HttpRequest) -> dict:
    row = side_effect(request.headers.get("Idempotency-Key", ""), str(request.user))
    return {"row": row.pk, "user": str(request.user)}


# --- Django views -------------------------------------------------------------------------

@csrf_exempt
@idempotent("payment.capture")
def template_view(request: HttpRequest) -> TemplateResponse:
    return TemplateResponse(request, PAGE, _effect(request), status=201)


@csrf_exempt
@idempotent("payment.capture")
def file_view(request: HttpRequest) -> FileResponse:
    _effect(request)
    return FileResponse(iter([b"file ", b"body"]), content_type="text/plain")


@method_decorator(csrf_exempt, name="dispatch")
@method_decorator(idempotent("payment.capture"), name="dispatch")
class OnDispatch(View):
    def post(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse(_effect(request), status=201)


@method_decorator(csrf_exempt, name="dispatch")
class OnPost(View):
    @method_decorator(idempotent("payment.capture"))
    def post(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse(_effect(request), status=201)


# --- The contract's switches, sync and async ------------------------------------------------
# One view of each kind answers the same query: ?status= (default 201), ?sleep= seconds after
# its write, ?raise=error|not-found after it (the async ones also ?hold=<name>: until an
# AuditEntry "test.go" <name> is committed); tests.receipts.urls.hooks["hook"] runs after the
# write, inside the view's transaction. tests/receipts/test_view_contract.py runs every case
# against each path of CONTRACT_VIEWS.

VIEW_RAISES = {"error": lambda: RuntimeError("ledger unreachable"), "not-found": lambda: Http404("no such order")}


def _answer(request: HttpRequest, row_pk: int) -> HttpResponse:
    if "raise" in request.GET:
        raise VIEW_RAISES[request.GET["raise"]]()
    status = int(request.GET.get("status", "201"))
    return JsonResponse({"row": row_pk, "status": status}, status=status)


@csrf_exempt
@idempotent("payment.capture")
def function_view(request: HttpRequest) -> HttpResponse:
    row = side_effect(request.headers.get("Idempotency-Key", ""), str(request.user))
    time.sleep(float(request.GET.get("sleep", 0)))
    if "hook" in hooks:
        hooks["hook"]()
    return _answer(request, row.pk)


async def _async_capture(request: HttpRequest) -> HttpResponse:
    # As an async view writes: the async ORM, and the request's user through auser().
    row = await aside_effect(request.headers.get("Idempotency-Key", ""), str(await request.auser()))
    await asyncio.sleep(float(request.GET.get("sleep", 0)))
    if "hold" in request.GET:  # until the test says go (a row from another process), at most 60 s
        for _ in range(1200):
            if await AuditEntry.objects.filter(action="test.go", object_id=request.GET["hold"]).aexists():
                break
            await asyncio.sleep(0.05)
    if "hook" in hooks:
        await sync_to_async(hooks["hook"])()
    return _answer(request, row.pk)


def release_hold(name: str) -> None:
    """Let the views held with ?hold=<name> go on."""
    AuditEntry.objects.create(created_at=timezone.now(), actor="test", action="test.go", object_type="test",
                              object_id=name)


@csrf_exempt
@idempotent("payment.capture")
async def async_function_view(request: HttpRequest) -> HttpResponse:
    return await _async_capture(request)


@method_decorator(csrf_exempt, name="dispatch")
class AsyncOnPost(View):
    @method_decorator(idempotent("payment.capture"))
    async def post(self, request: HttpRequest) -> HttpResponse:
        return await _async_capture(request)


@method_decorator(csrf_exempt, name="dispatch")
@method_decorator(idempotent("payment.capture"), name="dispatch")
class AsyncOnDispatch(View):
    """The order that cannot work: View.dispatch is sync and returns the handler's coroutine."""

    async def post(self, request: HttpRequest) -> HttpResponse:
        return await _async_capture(request)


class Captured(Schema):
    row: int
    status: int


ninja_api = NinjaAPI(urls_namespace="receipts-tests-view-kinds")
ANY_STATUS = {codes_2xx: Captured, codes_4xx: Captured, codes_5xx: Captured}


def _ninja_answer(request: HttpRequest, row_pk: int) -> Status:
    # The same switches, answered as a Ninja operation answers: a Status its schema renders.
    if "raise" in request.GET:
        raise VIEW_RAISES[request.GET["raise"]]()
    status = int(request.GET.get("status", "201"))
    return Status(status, {"row": row_pk, "status": status})


@ninja_api.post("/capture", response=ANY_STATUS)
@ninja.idempotent("payment.capture")
def ninja_operation(request: HttpRequest) -> Status:
    row = side_effect(request.headers.get("Idempotency-Key", ""), str(request.user))
    time.sleep(float(request.GET.get("sleep", 0)))
    if "hook" in hooks:
        hooks["hook"]()
    return _ninja_answer(request, row.pk)


@ninja_api.post("/async-capture", response=ANY_STATUS)
@ninja.idempotent("payment.capture")
async def ninja_async_operation(request: HttpRequest) -> Status:
    row = await aside_effect(request.headers.get("Idempotency-Key", ""), str(await request.auser()))
    await asyncio.sleep(float(request.GET.get("sleep", 0)))
    if "hook" in hooks:
        await sync_to_async(hooks["hook"])()
    return _ninja_answer(request, row.pk)


# Every kind of view the shared contract tests run against.
CONTRACT_VIEWS = ["/function", "/async-function", "/async-cbv-post", "/ninja/capture", "/ninja/async-capture"]
ASYNC_VIEWS = ["/async-function", "/async-cbv-post", "/ninja/async-capture"]


# --- DRF views ----------------------------------------------------------------------------

class BearerNameAuthentication(BaseAuthentication):
    def authenticate(self, request):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.startswith("jwt."):
            return None
        try:
            return User.objects.get(username=token.removeprefix("jwt.")), token
        except User.DoesNotExist as exc:
            raise exceptions.AuthenticationFailed("no such user") from exc

    def authenticate_header(self, request) -> str:
        return "Bearer"


AUTHENTICATION = [BearerNameAuthentication, SessionAuthentication]

# What ?raise= makes a DRF view raise after its side effect.
RAISED = {
    "validation": lambda: exceptions.ValidationError({"amount": ["too large"]}),
    "not-authenticated": exceptions.NotAuthenticated,
    "permission": exceptions.PermissionDenied,
    "throttled": lambda: exceptions.Throttled(wait=3),
    "not-found": exceptions.NotFound,
    "server": exceptions.APIException,
}


def _drf_answer(request) -> Response:
    body = _effect(request)
    if "raise" in request.query_params:
        raise RAISED[request.query_params["raise"]]()
    return Response(body, status=int(request.query_params.get("status", status.HTTP_201_CREATED)))


@api_view(["POST"])
@authentication_classes(AUTHENTICATION)
@idempotent("payment.capture")
def api_function(request) -> Response:
    return _drf_answer(request)


@api_view(["POST"])
@authentication_classes(AUTHENTICATION)
@drf.idempotent("payment.capture")
def api_function_drf(request) -> Response:
    return _drf_answer(request)


class Capture(APIView):
    authentication_classes = AUTHENTICATION

    @drf.idempotent("payment.capture")
    def post(self, request) -> Response:
        return _drf_answer(request)


class CaptureMethodDecorator(APIView):
    authentication_classes = AUTHENTICATION

    @method_decorator(idempotent("payment.capture"))
    def post(self, request) -> Response:
        return _drf_answer(request)


class Orders(viewsets.ViewSet):
    authentication_classes = AUTHENTICATION

    @drf.idempotent("payment.capture")
    def create(self, request) -> Response:
        return _drf_answer(request)

    @drf.idempotent("payment.capture")
    def partial_update(self, request, pk: str) -> Response:
        return _drf_answer(request)


@method_decorator(idempotent("payment.capture"), name="dispatch")
class CaptureOnDispatch(APIView):
    """The order that cannot work: dispatch runs before DRF authenticates."""

    authentication_classes = AUTHENTICATION

    def post(self, request) -> Response:
        return _drf_answer(request)


urlpatterns = [
    path("template", template_view),
    path("file", file_view),
    path("cbv-dispatch", OnDispatch.as_view()),
    path("cbv-post", OnPost.as_view()),
    path("api-function", api_function),
    path("api-function-drf", api_function_drf),
    path("api-view", Capture.as_view()),
    path("api-view-method-decorator", CaptureMethodDecorator.as_view()),
    path("orders", Orders.as_view({"post": "create"})),
    path("orders/<str:pk>", Orders.as_view({"patch": "partial_update"})),
    path("api-view-on-dispatch", CaptureOnDispatch.as_view()),
    path("ninja/", ninja_api.urls),
    path("function", function_view),
    path("async-function", async_function_view),
    path("async-cbv-post", AsyncOnPost.as_view()),
    path("async-cbv-dispatch", AsyncOnDispatch.as_view()),
]
