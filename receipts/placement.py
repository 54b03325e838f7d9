"""Where a receipts decorator may stand: each misplacement refused by one function here, at
import, at the first request, or by the system check (receipts/checks.py), in the same words."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from django.core.exceptions import ImproperlyConfigured

DOCS = "(docs/http-contract.md: Each kind of view)"
NINJA_PLACEMENT = (
    "Put `from receipts.ninja import idempotent` directly below @api.post(...) (or the router's "
    f"operation decorator), above the function {DOCS}."
)


class Refusal(NamedTuple):
    """A misplacement: what is wrong, how to mend it, and its system check id."""

    message: str
    hint: str
    id: str

    def __str__(self) -> str:
        return f"{self.message} {self.hint}"


def refuse_view(view: Callable, operation: str) -> None:
    """At import: a DRF view made by as_view() (not yet authenticated), or a method taking `self`."""
    if hasattr(view, "cls") and hasattr(view, "initkwargs"):
        raise ImproperlyConfigured(
            f"@idempotent({operation!r}) wraps {view.cls.__name__}.as_view(), where DRF has not "
            "authenticated the caller yet. Put @idempotent below @api_view, or decorate the "
            f"APIView/ViewSet method with receipts.drf.idempotent {DOCS}."
        )
    if _first_parameter(view) == "self":
        raise ImproperlyConfigured(
            f"@idempotent({operation!r}) decorates the method {view.__qualname__}, but takes the "
            "request as its first argument. Use method_decorator(idempotent(...)) on a Django "
            f"class-based view, or receipts.drf.idempotent on a DRF one {DOCS}."
        )


def refuse_ninja(view: Callable, operation: str, name: str) -> None:
    """At import: a decorator above a Ninja operation decorator (it would never run), or given
    Ninja's `Operation.run` by ninja.decorate_view (before Ninja authenticates the caller)."""
    ninja = sys.modules.get("ninja.operation")
    if hasattr(view, "_ninja_operation"):
        raise ImproperlyConfigured(
            f"{name}({operation!r}) is above the Ninja operation decorator of {view.__qualname__}, "
            f"which has registered the function already: the decorator would never run. {NINJA_PLACEMENT}"
        )
    if ninja is not None and isinstance(getattr(view, "__self__", None), ninja.Operation):
        raise ImproperlyConfigured(
            f"{name}({operation!r}) wraps a Ninja operation's run (decorate_view), which runs before "
            f"Ninja authenticates the caller. {NINJA_PLACEMENT}"
        )


def ninja_operation_hook(operation: str) -> Callable[[Any], None]:
    """Refuses the plain decorator below @api.post, which would store the result before Ninja renders it."""

    def refuse(ninja_operation: Any) -> None:
        raise ImproperlyConfigured(
            f"receipts.decorators.idempotent({operation!r}) is on the Ninja operation "
            f"{ninja_operation.view_func.__qualname__}: it would store the result before Ninja renders it, "
            f"under a scope Ninja's authentication (request.auth) does not reach. {NINJA_PLACEMENT}"
        )

    return refuse


def ninja_not_closest() -> ImproperlyConfigured:
    return ImproperlyConfigured(
        "receipts.ninja.idempotent must be the decorator closest to the Ninja operation decorator's "
        f"hooks; another one wrapped Operation.run first. {NINJA_PLACEMENT}"
    )


def ninja_outside(operation: str, view: Callable) -> ImproperlyConfigured:
    return ImproperlyConfigured(
        f"receipts.ninja.idempotent({operation!r}) on {view.__qualname__} was called outside a Ninja "
        f"operation. {NINJA_PLACEMENT}"
    )


def drf_without_request(operation: str, handler: Callable) -> ImproperlyConfigured:
    return ImproperlyConfigured(
        f"receipts.drf.idempotent({operation!r}) on {handler.__qualname__} was called without "
        "a DRF Request: it goes on an APIView/ViewSet handler method or below @api_view."
    )


def dispatch_refusal(view_class: type, operation: str) -> Refusal | None:
    """`method_decorator(idempotent(...), name="dispatch")` on a DRF APIView (before DRF
    authenticates the caller) or on a View with `async def` handlers (dispatch is sync)."""
    name = f"@idempotent({operation!r}) decorates {view_class.__qualname__}.dispatch"
    if hasattr(view_class, "initialize_request"):
        return Refusal(
            f"{name}, which runs before DRF authenticates the caller.",
            f"Decorate the handler method (post, create, ...) with receipts.drf.idempotent instead {DOCS}.",
            "receipts.E001",
        )
    if getattr(view_class, "view_is_async", False):
        return Refusal(
            f"{name}, whose handlers are async def: dispatch is sync and returns their coroutine.",
            f"Decorate the handler method instead: @method_decorator(idempotent(...)) on async def post {DOCS}.",
            "receipts.E005",
        )
    return None


def refuse_dispatch(view: Callable, request: object, operation: str) -> None:
    """At the first request, where method_decorator first shows a decorated dispatch's class."""
    owner = getattr(getattr(view, "func", None), "__self__", None)
    if owner is None or _is_drf_request(request):  # a DRF handler is given DRF's Request
        return
    refusal = dispatch_refusal(type(owner), operation)
    if refusal is not None:
        raise ImproperlyConfigured(str(refusal))


def not_async(view: Callable[..., Any], operation: str) -> ImproperlyConfigured:
    name = getattr(view, "__qualname__", repr(view))
    return ImproperlyConfigured(
        f"@idempotent({operation!r}) decorates {name}, which is not a coroutine function but "
        "returned an awaitable: a decorator between them hides that the view is async. Mark the "
        "outer function with asgiref.sync.markcoroutinefunction, or put @idempotent directly on "
        f"the async def {DOCS}."
    )


def _first_parameter(view: Callable) -> str | None:
    try:
        return next(iter(inspect.signature(view, follow_wrapped=False).parameters), None)
    except (TypeError, ValueError):  # a callable without a signature: nothing to check
        return None


def _is_drf_request(request: object) -> bool:
    drf = sys.modules.get("rest_framework.request")
    return drf is not None and isinstance(request, drf.Request)
