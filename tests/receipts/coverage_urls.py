"""A URLconf with a write route of every kind the coverage introspects, each once protected
and once not, written as each framework's users write them (tests/receipts/test_coverage.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from ninja import NinjaAPI, Router
from rest_framework import routers, viewsets
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.views import APIView

from receipts import drf, ninja
from receipts.decorators import idempotent
from webhooks import views as webhook_views


@csrf_exempt
@require_POST
@idempotent("order.create")
def create_order(request: HttpRequest) -> HttpResponse:
    return HttpResponse(status=201)


@require_http_methods(["POST", "DELETE"])
def refund(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse()


@require_GET
def order_list(request: HttpRequest) -> HttpResponse:
    return HttpResponse()


def anything(request: HttpRequest) -> HttpResponse:
    return HttpResponse()


@idempotent("order.async_pay")
async def async_pay(request: HttpRequest) -> HttpResponse:
    return HttpResponse()


class Cancel(View):
    @method_decorator(idempotent("order.cancel"))
    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse()

    def delete(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse()


class Notes(View):
    async def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse()


@api_view(["POST"])
@drf.idempotent("invoice.create")
def create_invoice(request):
    return Response(status=201)


@api_view(["GET", "PUT"])
def replace_invoice(request, pk):
    return Response()


class Charges(APIView):
    @drf.idempotent("charge.create")
    def post(self, request):
        return Response(status=201)

    def patch(self, request):
        return Response()


class Subscriptions(viewsets.ViewSet):
    @drf.idempotent("subscription.create")
    def create(self, request):
        return Response(status=201)

    def list(self, request):
        return Response([])

    def destroy(self, request, pk=None):
        return Response(status=204)


class NotAView:
    """A callable object the coverage has no way to read: listed as unknown."""

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse()


api = NinjaAPI(urls_namespace="shop-api")
router = Router()


@api.post("/carts")
@ninja.idempotent("cart.create")
def create_cart(request):
    return {"ok": True}


@router.put("/carts/{cart_id}")
def replace_cart(request, cart_id: int):
    return {"ok": True}


@router.get("/carts/{cart_id}")
def cart(request, cart_id: int):
    return {"ok": True}


api.add_router("/v2", router)
drf_router = routers.DefaultRouter()
drf_router.register("subscriptions", Subscriptions, basename="subscription")

shop = ([
    path("orders/", create_order, name="create"),
    path("orders/<int:pk>/refund/", refund, name="refund"),
    path("orders/list/", order_list, name="list"),
], "shop")

urlpatterns = [
    path("shop/", include(shop)),
    path("anything/", anything),
    path("pay/", async_pay, name="pay"),
    path("orders/<int:pk>/cancel/", Cancel.as_view(), name="cancel"),
    path("notes/", Notes.as_view(), name="notes"),
    path("invoices/", create_invoice, name="invoices"),
    path("invoices/<int:pk>/", replace_invoice, name="invoice"),
    path("charges/", Charges.as_view(), name="charges"),
    path("drf/", include(drf_router.urls)),
    path("api/", api.urls),
    path("odd/", NotAView()),
    path("webhooks/<slug:slug>/", webhook_views.receive, name="webhook"),
]
