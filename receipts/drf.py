"""The Idempotency-Key contract for Django REST framework views: `idempotent` goes on an
APIView's handler method or below `@api_view`, after DRF has authenticated the caller and
before it renders the Response."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from rest_framework.request import Request

from receipts import decorators, placement

Handler = Callable[..., HttpResponseBase]


def idempotent(
    operation: str,
    required: bool = True,
    *,
    scope: Callable[[HttpRequest], str] | None = None,
) -> Callable[[Handler], Handler]:
    """`receipts.decorators.idempotent` for a DRF handler; the default scope is DRF's `request.user`."""
    protect = decorators.idempotent(operation, required, scope=scope)  # validates the operation
    protection = decorators.Protection(operation, required, scope)

    def decorator(handler: Handler) -> Handler:
        if hasattr(handler, "cls"):
            protect(handler)  # raises ImproperlyConfigured with the order to use

        # Checked once, above: per request only the contract runs.
        @functools.wraps(handler)
        def wrapper(*args: Any, **kwargs: Any) -> HttpResponseBase:
            if args and isinstance(args[0], Request):  # a function below @api_view
                return decorators.respond(args[0], handler, args[1:], kwargs, protection)
            if len(args) >= 2 and isinstance(args[1], Request):  # a method: (self, request, ...)
                bound = functools.partial(handler, args[0])
                return decorators.respond(args[1], bound, args[2:], kwargs, protection)
            raise placement.drf_without_request(operation, handler)

        wrapper.idempotent_operation = operation  # type: ignore[attr-defined]
        return wrapper

    return decorator
