"""System checks (`manage.py check`, run by runserver and migrate) for decorator placement
that the decorator itself can only see at the first request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.core.checks import Error, Tags, register
from django.urls import URLPattern, URLResolver, get_resolver


def _callbacks(patterns: list[Any]) -> Iterator[Any]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _callbacks(pattern.url_patterns)
        elif isinstance(pattern, URLPattern):
            yield pattern.callback


@register(Tags.urls)
def idempotent_on_drf_dispatch(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """`method_decorator(idempotent(...), name="dispatch")` on a DRF APIView: method_decorator
    copies the decorator's marker onto `dispatch`, and DRF marks its views with `cls`."""
    errors = []
    seen = set()
    for callback in _callbacks(get_resolver().url_patterns):
        view_class = getattr(callback, "cls", None)
        if view_class is None or view_class in seen or not hasattr(view_class, "initialize_request"):
            continue
        seen.add(view_class)
        operation = getattr(view_class.dispatch, "idempotent_operation", None)
        if operation is not None:
            errors.append(Error(
                f"@idempotent({operation!r}) decorates {view_class.__qualname__}.dispatch, which runs "
                "before DRF authenticates the caller.",
                hint="Decorate the handler method (post, create, ...) with receipts.drf.idempotent "
                "(docs/http-contract.md: Each kind of view).",
                obj=view_class,
                id="receipts.E001",
            ))
    return errors
