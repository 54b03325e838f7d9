"""receipts/coverage.py: every write route of a URLconf of every kind, with its protection."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from receipts import coverage, observe, store
from tests.receipts import coverage_urls

URLCONF = "tests.receipts.coverage_urls"


def _rows(**options) -> set[tuple[str, str, str, str]]:
    return {(r.method, "/" + r.path, r.kind, r.operation or r.protected_by)
            for r in coverage.routes(urlconf=URLCONF, **options)}


def test_every_write_route_of_every_kind_is_listed_with_its_operation_or_none():
    webhook = coverage_urls.webhook_views.receive.idempotency_protected_by
    assert _rows() == {
        ("POST", "/shop/orders/", "function", "order.create"),
        ("POST", "/shop/orders/<int:pk>/refund/", "function", ""),
        ("DELETE", "/shop/orders/<int:pk>/refund/", "function", ""),
        ("any", "/anything/", "function", ""),
        ("any", "/pay/", "async function", "order.async_pay"),
        ("POST", "/orders/<int:pk>/cancel/", "class", "order.cancel"),
        ("DELETE", "/orders/<int:pk>/cancel/", "class", ""),
        ("POST", "/notes/", "async class", ""),
        ("POST", "/invoices/", "DRF view", "invoice.create"),
        ("PUT", "/invoices/<int:pk>/", "DRF view", ""),
        ("POST", "/charges/", "DRF view", "charge.create"),
        ("PATCH", "/charges/", "DRF view", ""),
        # A regex's leading ^ after an include left out, as Django's resolver names the route.
        ("POST", "/drf/subscriptions/$", "DRF viewset", "subscription.create"),
        ("DELETE", "/drf/subscriptions/(?P<pk>[^/.]+)/$", "DRF viewset", ""),
        ("POST", "/api/carts", "Ninja", "cart.create"),
        ("PUT", "/api/v2/carts/<cart_id>", "Ninja", ""),
        ("any", "/odd/", "unknown", ""),
        ("any", "/webhooks/<slug:slug>/", "function", webhook),
    }


def test_read_only_routes_are_not_listed():
    listed = {r.path for r in coverage.routes(urlconf=URLCONF)}
    assert "shop/orders/list/" not in listed  # @require_GET
    assert "api/v2/carts/<cart_id>" in listed and ("GET", "api/v2/carts/<cart_id>") not in {
        (r.method, r.path) for r in coverage.routes(urlconf=URLCONF)}


def test_views_are_named_by_the_function_or_class_their_author_wrote():
    views = {r.path: r.view for r in coverage.routes(urlconf=URLCONF)}
    assert views["invoices/"] == "tests.receipts.coverage_urls.create_invoice"  # not DRF's WrappedAPIView
    assert views["orders/<int:pk>/cancel/"] == "tests.receipts.coverage_urls.Cancel"
    assert views["api/carts"] == "tests.receipts.coverage_urls.create_cart"


def test_the_products_and_frameworks_own_routes_are_listed_only_when_asked():
    own = {r.view for r in coverage.routes(urlconf=URLCONF, everything=True)} - {
        r.view for r in coverage.routes(urlconf=URLCONF)}
    # Ninja's API root and its OpenAPI pages take any method: listed with the product's own.
    assert own == {"ninja.openapi.views.default_home", "ninja.openapi.views.openapi_json", "ninja.openapi.views.openapi_view"}


def test_the_demos_views_stand_for_a_hosts_listed_and_observed():
    from idemdash.devtools import shop

    listed = {r.path: r for r in coverage.routes(urlconf="idemdash.devtools.urls")}
    assert listed["demo/shop/refunds/"].view == "idemdash.devtools.shop.refund"
    assert coverage.takes_unprotected(shop.refund, "POST")


def test_the_json_api_says_what_protects_its_writes(settings):
    settings.ROOT_URLCONF = "idemdash.urls"
    api = {r.path: r for r in coverage.routes() if r.path.startswith("api/v1/")}
    assert sorted(api) == ["api/v1/outbox", "api/v1/receipts/claim", "api/v1/receipts/complete",
                           "api/v1/receipts/fail", "api/v1/receipts/heartbeat"]
    assert all(r.protected and "keyed or fenced" in r.protected_by for r in api.values())


def test_a_route_it_cannot_read_is_listed_as_unknown_never_raised(monkeypatch):
    def raising(*args, **kwargs):
        raise RuntimeError("a callable built in a way nobody expected")

    monkeypatch.setattr(coverage, "_introspected", raising)
    assert {r.kind for r in coverage.routes(urlconf=URLCONF)} == {"unknown"}


def test_an_include_that_cannot_be_resolved_is_listed_not_raised():
    found = coverage.routes(urlconf="tests.receipts.coverage_broken_urls")
    assert [(r.method, r.path, r.kind) for r in found] == [
        ("any", "broken/", "unknown"), ("POST", "refund/<int:pk>/", "function"), ("DELETE", "refund/<int:pk>/", "function")]


def test_fail_unprotected_names_the_unprotected_routes_a_pattern_matches():
    found = coverage.routes(urlconf=URLCONF)
    assert {(r.method, r.path) for r in coverage.unprotected(found, ["/shop/*"])} == {
        ("POST", "shop/orders/<int:pk>/refund/"), ("DELETE", "shop/orders/<int:pk>/refund/")}
    assert {r.name for r in coverage.unprotected(found, ["shop-api:*"])} == {"shop-api:replace_cart"}
    assert coverage.unprotected(found, ["/pay/", "/invoices/"]) == []  # protected


@pytest.mark.django_db
def test_figures_count_each_operations_keys_and_duplicates_in_the_window():
    first = store.claim("client:a", "o-1", "order.create", {"n": 1})
    store.complete(first.held, body="{}")
    store.claim("client:a", "o-1", "order.create", {"n": 1})  # replayed
    store.claim("client:a", "o-1", "order.create", {"n": 2})  # 422: another request
    store.claim("client:a", "c-1", "order.cancel", {"n": 1})  # running: the next is a 409
    store.claim("client:a", "c-1", "order.cancel", {"n": 1})
    found = coverage.routes(urlconf=URLCONF)
    assert coverage.figures(found, timezone.now() - timedelta(hours=1)) == {
        "cart.create": {"keys": 0, "duplicates": 0},
        "charge.create": {"keys": 0, "duplicates": 0},
        "invoice.create": {"keys": 0, "duplicates": 0},
        "order.async_pay": {"keys": 0, "duplicates": 0},
        "order.cancel": {"keys": 1, "duplicates": 1},
        "order.create": {"keys": 1, "duplicates": 2},
        "subscription.create": {"keys": 0, "duplicates": 0},
    }
    assert coverage.figures(found, timezone.now() + timedelta(seconds=1))["order.create"] == {"keys": 0, "duplicates": 0}


@pytest.mark.django_db
def test_the_table_gives_a_protected_route_its_policy_and_figures_and_an_unprotected_one_none(settings):
    settings.ROOT_URLCONF = URLCONF
    rows = {(r["method"], r["path"]): r for r in coverage.table(coverage.routes())}
    assert rows[("POST", "shop/orders/")]["policy"]["on_failure"] == "retry"
    assert rows[("POST", "shop/orders/")]["keys"] == 0
    refund = rows[("POST", "shop/orders/<int:pk>/refund/")]
    assert (refund["protected"], refund["policy"], refund["keys"], refund["requests"], refund["duplicates"]) == (
        False, None, None, 0, 0)


@pytest.mark.django_db
def test_an_unprotected_route_gets_the_requests_and_would_be_duplicates_the_observer_noted(client, settings):
    settings.ROOT_URLCONF = URLCONF
    for _ in range(2):
        client.post("/shop/orders/3/refund/", "{}", content_type="application/json")
    client.delete("/shop/orders/3/refund/")
    client.post("/anything/", "{}", content_type="application/json")
    observe.flush()
    rows = {(r["method"], r["path"]): r for r in coverage.table(coverage.routes())}
    assert (rows[("POST", "shop/orders/<int:pk>/refund/")]["requests"], rows[("POST", "shop/orders/<int:pk>/refund/")]["duplicates"]) == (2, 1)
    assert rows[("DELETE", "shop/orders/<int:pk>/refund/")]["requests"] == 1
    assert rows[("any", "anything/")]["requests"] == 1  # a view taking any method: every write counted
    [recent] = coverage.recent_duplicates()
    assert (recent["method"], recent["route"], recent["caller"]) == ("POST", "shop/orders/<int:pk>/refund/", "anonymous")


@pytest.mark.django_db
def test_a_routers_unprotected_route_gets_what_the_observer_noted_under_djangos_name_for_it(client, settings):
    settings.ROOT_URLCONF = URLCONF
    for _ in range(2):
        client.delete("/drf/subscriptions/5/")
    observe.flush()
    rows = {(r["method"], r["path"]): r for r in coverage.table(coverage.routes())}
    destroy = rows[("DELETE", "drf/subscriptions/(?P<pk>[^/.]+)/$")]
    assert (destroy["requests"], destroy["duplicates"]) == (2, 1)
