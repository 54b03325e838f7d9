"""Which write routes of the URLconf a receipt protects, found by introspecting every kind of
view, with each route's figures: a protected one's keys and duplicates, an unprotected one's
requests and would-be duplicates as receipts/observe.py noted them (docs/coverage.md)."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Q, Window
from django.db.models.functions import Lag
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from receipts import rollup
from receipts.conf import policy_for, setting
from receipts.models import Attempt, ObservedRequest, Receipt

WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
# A view that does not restrict its methods takes every write method: one row for all of them.
ANY = "any"
# The product's and Django's own views, listed with `everything=True` only (the demo's are a host's).
OWN_PACKAGES = ("django.", "idemdash.core.", "idemdash.dashboard.", "idemdash.worker.", "idemdash.errors.",
                "receipts.", "webhooks.", "rest_framework.", "ninja.")
DUPLICATE_OUTCOMES = (Attempt.Outcome.REPLAYED, Attempt.Outcome.MISMATCH, *Attempt.CONCURRENT_OUTCOMES)


@dataclass(frozen=True)
class Route:
    """One write method of one route: its `operation`, or what else protects it (`protected_by`)."""

    method: str
    path: str
    name: str
    view: str
    kind: str
    operation: str = ""
    protected_by: str = ""

    @property
    def protected(self) -> bool:
        return bool(self.operation or self.protected_by)


def routes(*, everything: bool = False, urlconf: str | None = None) -> list[Route]:
    """Every write route of `urlconf` in order; without `everything`, not OWN_PACKAGES' views
    unless they protect themselves (the webhook receiver)."""
    if urlconf is None and not getattr(settings, "ROOT_URLCONF", None):
        return []  # a worker's settings route no view
    found, seen = [], set()
    for path, name, callback in _patterns(get_resolver(urlconf).url_patterns, "", ""):
        for route in _routes_of(path, name, callback):
            # Django routes a request to the first pattern that matches.
            if (route.method, route.path) in seen:
                continue
            seen.add((route.method, route.path))
            if everything or route.protected_by or not route.view.startswith(OWN_PACKAGES):
                found.append(route)
    return found


@functools.lru_cache(maxsize=4096)
def takes_unprotected(callback: Any, method: str) -> bool:
    """Whether a `method` request routed to `callback` is a write nothing protects."""
    if method not in WRITE_METHODS:
        return False
    for route in _routes_of("", "", callback):
        if route.method in (method, ANY):
            return not route.protected and not route.view.startswith(OWN_PACKAGES)
    return False  # a method the view does not take: it answers 405 and writes nothing


def unprotected(found: list[Route], patterns: list[str]) -> list[Route]:
    """The unprotected routes whose path (with a leading /) or URL name matches a pattern."""
    return [r for r in found if not r.protected and any(
        fnmatchcase("/" + r.path, p) or (r.name and fnmatchcase(r.name, p)) for p in patterns)]


def figures(found: list[Route], since: datetime) -> dict[str, dict[str, int]]:
    """Per operation of `found`: the keys first claimed since `since` and the duplicates
    answered since, as the overview counts them."""
    operations = sorted({r.operation for r in found if r.operation})
    counted = {op: {"keys": 0, "duplicates": 0} for op in operations}
    if not operations:
        return counted
    keys = Receipt.objects.filter(operation__in=operations, created_at__gte=since)
    duplicates = Attempt.objects.filter(operation__in=operations, outcome__in=DUPLICATE_OUTCOMES, created_at__gte=since)
    for figure, rows in (("keys", keys), ("duplicates", duplicates)):
        for row in rows.values("operation").annotate(n=Count("id")):
            counted[row["operation"]][figure] = row["n"]
    return counted


def unprotected_counts(since: datetime, now: datetime | None = None) -> dict[tuple[str, str], dict[str, int]]:
    """Per (method, route): the requests noted since `since`, their would-be duplicates and skipped."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    for _, method, route, kind, count in rollup.OBSERVED.counts(since, now or timezone.now()):
        counted = found.setdefault((method, route), {"requests": 0, "duplicates": 0, "skipped": 0})
        counted["requests"] += count
        if kind != "first":
            counted[{"duplicate": "duplicates", "skipped": "skipped"}[kind]] += count
    return found


def recent_duplicates(limit: int = 20) -> list[dict[str, Any]]:
    """The latest would-be duplicates: when, who, which route, and the request's fingerprint."""
    window = timedelta(seconds=setting("RECEIPTS_OBSERVE_WINDOW_SECONDS"))
    since = timezone.now() - timedelta(hours=setting("RECEIPTS_OBSERVE_RETENTION_HOURS"))
    # `previous`: when the same fingerprint was noted on the route before.
    previous = Window(Lag("at"), partition_by=[F("route"), F("fingerprint")], order_by=[F("at").asc(), F("id").asc()])
    rows = ObservedRequest.objects.filter(~Q(fingerprint=""), at__gte=since).annotate(previous=previous).values(
        "method", "route", "caller", "fingerprint", "at", "previous")
    duplicates = [{**row, "gap": round((row["at"] - row["previous"]).total_seconds(), 1)} for row in rows
                  if row["previous"] is not None and row["at"] - row["previous"] <= window]
    duplicates.sort(key=lambda row: row["at"], reverse=True)
    return duplicates[:limit]


def table(found: list[Route], window: timedelta = timedelta(hours=24)) -> list[dict[str, Any]]:
    """`found` with each operation's policy and figures, as the command's JSON and the page show them."""
    since = timezone.now() - window
    counted, observed = figures(found, since), unprotected_counts(since)
    rows = []
    for route in found:
        row: dict[str, Any] = {**asdict(route), "protected": route.protected, "policy": None, "keys": None,
                               "duplicates": None, "requests": None}
        if route.operation:
            row["policy"] = policy_for(route.operation).as_dict()
            row.update(counted[route.operation])
        elif not route.protected:
            noted = [figures for (method, path), figures in observed.items()
                     if path == route.path and route.method in (method, ANY)]
            row["requests"] = sum(n["requests"] for n in noted)
            row["duplicates"] = sum(n["duplicates"] for n in noted)
        rows.append(row)
    return rows


def callbacks() -> Iterator[Any]:
    """Every view the project's URLconf routes to, for the system checks."""
    for _, _, callback in _patterns(get_resolver().url_patterns, "", ""):
        if callback is not None:
            yield callback


def _patterns(patterns: list[Any], prefix: str, namespace: str) -> Iterator[tuple[str, str, Any]]:
    for pattern in patterns:
        path = _joined(prefix, str(pattern.pattern))
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            try:
                included = pattern.url_patterns
            except Exception:  # an include that cannot be resolved: said, not raised
                yield path, "", None
                continue
            yield from _patterns(included, path, inner)
        elif isinstance(pattern, URLPattern) and "(?P<format>" not in str(pattern.pattern):
            # (DRF's format-suffix twin of a route is the same view: left out.)
            yield path, f"{namespace}{pattern.name}" if pattern.name else "", pattern.callback


def _joined(prefix: str, route: str) -> str:
    """The route as Django's resolver joins it: a nested regex's leading ^ dropped."""
    return prefix + route.removeprefix("^") if prefix else route


def _routes_of(path: str, name: str, callback: Any) -> list[Route]:
    if callback is None:
        return [Route(ANY, path, name, "(an include that could not be imported)", "unknown")]
    try:
        return list(_introspected(path, name, callback))
    except Exception:  # a callable built in a way we do not know: listed, never raised
        return [Route(ANY, path, name, _dotted(callback), "unknown")]


def _introspected(path: str, name: str, callback: Any) -> Iterator[Route]:
    def route(method: str, kind: str, view: Any, *handlers: Any) -> Route:
        return Route(method, path, name, _dotted(view), kind, _operation(*handlers), _protected_by(callback))

    ninja = sys.modules.get("ninja.operation")
    path_view = inspect.getclosurevars(callback).nonlocals.get("self") if inspect.isfunction(callback) else None
    if ninja is not None and isinstance(path_view, ninja.PathView):
        for op in path_view.operations:
            for method in _writes(op.methods):
                yield route(method, "Ninja", op.view_func, op.view_func)
        return
    view_class = getattr(callback, "cls", None)
    if view_class is not None and hasattr(callback, "initkwargs"):  # DRF's as_view()
        actions = getattr(callback, "actions", None)
        if actions:  # a viewset, by hand or by a router: its method -> action map
            for method in _writes(m.upper() for m in actions):
                yield route(method, "DRF viewset", view_class, getattr(view_class, actions[method.lower()]))
            return
        for method in _handled(view_class):
            handler = getattr(view_class, method.lower())
            # @api_view's class is DRF's WrappedAPIView around the function: named for the function.
            named = list(_layers(handler))[-1] if view_class.__qualname__.endswith("WrappedAPIView") else view_class
            yield route(method, "DRF view", named, handler, view_class.dispatch)
        return
    view_class = getattr(callback, "view_class", None)
    if view_class is not None:  # Django's View.as_view()
        kind = "async class" if getattr(view_class, "view_is_async", False) else "class"
        for method in _handled(view_class):
            yield route(method, kind, view_class, getattr(view_class, method.lower()), view_class.dispatch)
        return
    function = inspect.unwrap(callback)
    if isinstance(function, functools.partial):
        function = function.func
    if not inspect.isfunction(function):
        yield Route(ANY, path, name, _dotted(callback), "unknown")
        return
    kind = "async function" if inspect.iscoroutinefunction(function) else "function"
    allowed = _allowed_methods(callback)
    for method in (ANY,) if allowed is None else _writes(allowed):
        yield route(method, kind, function, callback)


def _writes(methods: Any) -> list[str]:
    methods = {m.upper() for m in methods}
    return [m for m in WRITE_METHODS if m in methods]


def _handled(view_class: type) -> list[str]:
    return [m for m in WRITE_METHODS if m.lower() in view_class.http_method_names and hasattr(view_class, m.lower())]


def _layers(fn: Any) -> Iterator[Any]:
    """`fn` and what it wraps (__wrapped__, or the function of DRF's @api_view), outermost first."""
    seen = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        yield fn
        inner = getattr(fn, "__wrapped__", None)
        if inner is None and inspect.isfunction(fn):
            inner = inspect.getclosurevars(fn).nonlocals.get("func")
        fn = inner


def _operation(*handlers: Any) -> str:
    """The operation a receipts decorator marked one of `handlers` (or what they wrap) with."""
    for handler in handlers:
        for layer in _layers(handler):
            operation = getattr(layer, "idempotent_operation", None)
            if isinstance(operation, str):
                return operation
    return ""


def _allowed_methods(view: Callable) -> list[str] | None:
    """The methods require_http_methods lets through to a function view, or None."""
    for layer in _layers(view):
        if inspect.isfunction(layer):
            allowed = inspect.getclosurevars(layer).nonlocals.get("request_method_list")
            if allowed is not None:
                return list(allowed)
    return None


def _protected_by(callback: Any) -> str:
    return str(getattr(callback, "idempotency_protected_by", ""))


def _dotted(view: Any) -> str:
    module = getattr(view, "__module__", None) or type(view).__module__
    qualname = getattr(view, "__qualname__", None) or type(view).__qualname__
    return f"{module}.{qualname}"
