"""The Idempotency-Key contract for Django Ninja operations: `@idempotent` from here goes
directly below `@api.post(...)`, where Ninja has authenticated the caller, and renders the
result with the operation's own schema and renderer before it is stored, so a replay is the
first answer byte for byte. The contract is receipts.decorators.respond's."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured, RequestDataTooBig
from django.db import models
from django.http import HttpRequest, HttpResponseBase
from ninja.decorators import decorate_view
from ninja.operation import Operation
from ninja.security import APIKeyCookie, APIKeyHeader, APIKeyQuery

from idemdash.core.clients import ApiClient
from receipts import decorators, keys, placement

Function = Callable[..., Any]

# Where the operation running a request is kept for the function it calls.
_OPERATION = "_receipts_ninja_operation"


def idempotent(
    operation: str,
    required: bool = True,
    *,
    scope: Callable[[HttpRequest], str] | None = None,
) -> Callable[[Function], Function]:
    """Run the operation at most once per (scope, Idempotency-Key); the scope is `auth_scope`'s."""
    keys.validate_operation(operation)

    def decorator(view: Function) -> Function:
        placement.refuse_ninja(view, operation, "receipts.ninja.idempotent")
        protection = decorators.Protection(operation, required, scope or auth_scope)

        if iscoroutinefunction(view):
            # Ninja runs an AsyncOperation, which awaits this wrapper.
            @functools.wraps(view)
            async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
                ninja_operation = _operation_of(request, operation, view)

                async def rendered(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
                    return _render(ninja_operation, request, await view(request, *args, **kwargs), kwargs)

                return await decorators.arespond(request, rendered, args, kwargs, protection)

        else:

            @functools.wraps(view)
            def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
                ninja_operation = _operation_of(request, operation, view)

                def rendered(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
                    return _render(ninja_operation, request, view(request, *args, **kwargs), kwargs)

                return decorators.respond(request, rendered, args, kwargs, protection)

        # Ninja would resolve string annotations in the wrapper's module, not the function's.
        wrapper.__signature__ = _signature(view)  # type: ignore[attr-defined]
        # A list of our own (functools.wraps shares the function's), ours first, to get Operation.run.
        wrapper._ninja_contribute_to_operation = [  # type: ignore[attr-defined]
            *getattr(view, "_ninja_contribute_to_operation", [])
        ]
        decorate_view(_remember_operation)(wrapper)
        hooks = wrapper._ninja_contribute_to_operation  # type: ignore[attr-defined]
        hooks.insert(0, hooks.pop())
        wrapper.idempotent_operation = operation  # type: ignore[attr-defined]
        return wrapper

    return decorator


def _signature(view: Function) -> inspect.Signature:
    try:
        return inspect.signature(view, eval_str=True)
    except NameError:  # a name defined after the function: Ninja resolves it (or says so)
        return inspect.signature(view)


def auth_scope(request: HttpRequest) -> str:
    """The principal whose keys these are, from `request.auth`: its `idempotency_scope`, a
    user's `user:<pk>`, an ApiClient's scope, another model's `<label>:<pk>`, a JWT's subject,
    else the request's credentials hashed (its API keys included); no auth: default_scope.
    (docs/http-contract.md, "Each kind of view".)"""
    auth = getattr(request, "auth", None)
    if auth is None:
        return keys.default_scope(request)
    named = getattr(auth, "idempotency_scope", None)
    if isinstance(named, str) and named:
        return named
    if isinstance(auth, ApiClient):
        return auth.scope
    if getattr(auth, "is_authenticated", False) is True and getattr(auth, "pk", None) is not None:
        return f"user:{auth.pk}"
    if isinstance(auth, models.Model) and auth.pk is not None:
        return f"{auth._meta.label_lower}:{auth.pk}"
    subject = keys.subject_scope(auth)
    if subject is not None:
        return subject
    ninja_operation = getattr(request, _OPERATION, None)
    api_keys = _api_keys(ninja_operation, request) if ninja_operation is not None else []
    # A string is what many auth callbacks return: the token or the caller's name.
    scope = keys.credential_scope(request, *api_keys, auth if isinstance(auth, str) else "")
    if scope is None:
        raise ImproperlyConfigured(
            f"receipts.ninja.idempotent cannot tell whose keys these are: request.auth is a "
            f"{type(auth).__name__} and the request carries no credentials it knows. Give the auth "
            "object an `idempotency_scope` attribute, or pass scope= (docs/http-contract.md: Each kind of view)."
        )
    return scope


def _api_keys(ninja_operation: Operation, request: HttpRequest) -> list[str]:
    sources = {APIKeyHeader: request.headers, APIKeyCookie: request.COOKIES, APIKeyQuery: request.GET}
    return [values.get(callback.param_name) or "" for callback in ninja_operation.auth_callbacks
            for kind, values in sources.items() if isinstance(callback, kind)]


def _remember_operation(run: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps Operation.run (ninja.decorate_view): the function learns which operation renders
    its result, and a body too large gets the contract's 413 before Ninja's 400."""
    ninja_operation = getattr(run, "__self__", None)
    if not isinstance(ninja_operation, Operation):
        raise placement.ninja_not_closest()

    def too_large(request: HttpRequest) -> HttpResponseBase | None:
        setattr(request, _OPERATION, ninja_operation)
        if request.method in decorators.UNSAFE_METHODS:
            try:
                request.body  # noqa: B018 - read once; Django keeps it
            except RequestDataTooBig:
                return decorators.payload_too_large()
        return None

    if ninja_operation.is_async:

        @functools.wraps(run)
        async def async_remembered(request: HttpRequest, **kw: Any) -> HttpResponseBase:
            return too_large(request) or await run(request, **kw)

        return async_remembered

    @functools.wraps(run)
    def remembered(request: HttpRequest, **kw: Any) -> HttpResponseBase:
        return too_large(request) or run(request, **kw)

    return remembered


def _operation_of(request: HttpRequest, operation: str, view: Function) -> Operation:
    ninja_operation = getattr(request, _OPERATION, None)
    if ninja_operation is None:
        raise placement.ninja_outside(operation, view)
    return ninja_operation


def _render(ninja_operation: Operation, request: HttpRequest, result: Any, values: dict) -> HttpResponseBase:
    """The response Ninja would make of `result`, with the temporal response's headers and cookies."""
    arg = ninja_operation.signature.response_arg
    temporal = values[arg] if arg else ninja_operation.api.create_temporal_response(request)
    return ninja_operation._result_to_response(request, result, temporal)
