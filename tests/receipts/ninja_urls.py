"""Django Ninja operations behind receipts.ninja.idempotent (used with
@pytest.mark.urls("tests.receipts.ninja_urls")).

Each operation writes the side effect of tests.receipts.urls and answers with its response
schema. Callers authenticate with Ninja's own classes: JwtStandIn, an HttpBearer whose tokens
are `Bearer jwt.<username>` and whose `request.auth` is the user; django_auth (the session);
an APIKeyHeader whose `request.auth` is the key itself (a string); an HttpBearer whose
`request.auth` is a custom object naming its scope; and ClaimsBearer, whose `request.auth` is
the claims of a (stand-in) JWT: `Bearer claims.<sub>.<n>`, each n another token for the subject.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.urls import path
from ninja import NinjaAPI, Router, Schema
from ninja.errors import HttpError
from ninja.renderers import JSONRenderer
from ninja.responses import Status
from ninja.security import APIKeyHeader, HttpBearer, django_auth

from receipts.ninja import idempotent
from tests.receipts.urls import aside_effect, side_effect


class JwtStandIn(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> User | None:
        if token.startswith("jwt."):
            return User.objects.filter(username=token.removeprefix("jwt.")).first()
        return None


class KeyAsAuth(APIKeyHeader):
    param_name = "X-API-Key"

    def authenticate(self, request: HttpRequest, key: str | None) -> str | None:
        return key if key and key.startswith("key-") else None


@dataclass
class Tenant:
    name: str

    @property
    def idempotency_scope(self) -> str:
        return f"tenant:{self.name}"


class TenantBearer(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Tenant | None:
        return Tenant(token.removeprefix("tenant.")) if token.startswith("tenant.") else None


class ClaimsBearer(HttpBearer):
    """As a JWT auth class that returns the token's verified claims rather than a user."""

    def authenticate(self, request: HttpRequest, token: str) -> dict | None:
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != "claims":
            return None
        claims = {"iss": "https://idp.example", "sub": parts[1], "jti": parts[2]}
        return {k: v for k, v in claims.items() if v != "-"}  # "-": a claim the token lacks


class OrderIn(Schema):
    amount: int


class OrderOut(Schema):
    order: int
    amount: int
    caller: str


# What ?raise= makes an operation raise after its side effect.
RAISED = {
    "not-found": lambda: HttpError(404, "no such order"),
    "forbidden": lambda: HttpError(403, "not yours"),
    "server": lambda: RuntimeError("boom"),
}

api = NinjaAPI(urls_namespace="receipts-tests-ninja", auth=[JwtStandIn(), django_auth])
router = Router()


def _caller(request: HttpRequest) -> str:
    if isinstance(request.auth, str):
        return "api key"  # never the key itself: the tests look for it in what is stored
    if isinstance(request.auth, dict):
        return f"token {request.auth.get('jti', '-')}"  # which of the subject's tokens sent it
    return str(request.auth.name if isinstance(request.auth, Tenant) else request.auth)


def _place(request: HttpRequest, amount: int) -> dict:
    row = side_effect(request.headers.get("Idempotency-Key", ""), _caller(request))
    if "raise" in request.GET:
        raise RAISED[request.GET["raise"]]()
    return {"order": row.pk, "amount": amount, "caller": _caller(request)}


@api.post("/orders", response={201: OrderOut})
@idempotent("order.create")
def create_order(request: HttpRequest, payload: OrderIn) -> Status:
    return Status(201, _place(request, payload.amount))


@api.post("/orders-keyed", response={201: OrderOut}, auth=KeyAsAuth())
@idempotent("order.create")
def create_order_by_api_key(request: HttpRequest, payload: OrderIn) -> Status:
    return Status(201, _place(request, payload.amount))


@api.post("/orders-tenant", response={201: OrderOut}, auth=TenantBearer())
@idempotent("order.create")
def create_order_for_tenant(request: HttpRequest, payload: OrderIn) -> Status:
    return Status(201, _place(request, payload.amount))


@api.post("/orders-claims", response={201: OrderOut}, auth=ClaimsBearer())
@idempotent("order.create")
def create_order_for_claims(request: HttpRequest, payload: OrderIn) -> Status:
    return Status(201, _place(request, payload.amount))


@api.post("/async-orders", response={201: OrderOut})
@idempotent("order.create")
async def create_order_async(request: HttpRequest, payload: OrderIn) -> Status:
    row = await aside_effect(request.headers.get("Idempotency-Key", ""), _caller(request))
    return Status(201, {"order": row.pk, "amount": payload.amount, "caller": _caller(request)})


@api.put("/orders/{order_id}", response=OrderOut)
@idempotent("order.update")
def update_order(request: HttpRequest, order_id: int, payload: OrderIn, response: HttpResponse) -> OrderOut:
    """A single schema (status 200), a path parameter and headers set on Ninja's temporal response."""
    response["X-Order"] = str(order_id)
    response.set_cookie("last-order", str(order_id))
    return OrderOut(**_place(request, payload.amount))


@router.post("/raw", response={201: OrderOut}, auth=None)
@idempotent("order.create")
def create_order_from_raw_body(request: HttpRequest) -> Status:
    """No body parameter, no auth: the decorator alone reads the body (as a Django view does)."""
    row = side_effect(request.headers.get("Idempotency-Key", ""), str(request.user))
    return Status(201, {"order": row.pk, "amount": 0, "caller": str(request.user)})


class TextRenderer(JSONRenderer):
    media_type = "application/vnd.orders+json"


# The same router mounted in a second API with its own renderer: Ninja binds a copy of each
# operation to each API, and each renders (and stores) its own way.
other_api = NinjaAPI(urls_namespace="receipts-tests-ninja-other", renderer=TextRenderer())
api.add_router("/router", router)
other_api.add_router("/router", router)

urlpatterns = [path("api/", api.urls), path("other/", other_api.urls)]
