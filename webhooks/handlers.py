"""The handler registry: one function per (provider, event type).

    @webhook_handler("stripe", "checkout.session.completed")
    def fulfil(event: WebhookEvent) -> None: ...

A handler runs inside the transaction that marks its event completed, so its database
writes commit only if the worker still holds the event's lease. It must still be idempotent
on the provider's object id: an operator may reprocess an event, and two events may announce
one payment. Modules named `webhook_handlers` in installed apps are imported at start-up."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from webhooks.models import WebhookEvent

Handler = Callable[["WebhookEvent"], None]

_registry: dict[tuple[str, str], Handler] = {}


def webhook_handler(provider: str, event_type: str) -> Callable[[Handler], Handler]:
    """Register a handler. `event_type="*"` catches every type of the provider without its own."""

    def register(func: Handler) -> Handler:
        key = (provider, event_type)
        existing = _registry.get(key)
        if existing is not None and existing is not func:
            raise ValueError(f"{provider} {event_type} already has a handler: {existing.__qualname__}")
        _registry[key] = func
        return func

    return register


def handler_for(provider: str, event_type: str) -> Handler | None:
    return _registry.get((provider, event_type)) or _registry.get((provider, "*"))


def unregister(provider: str, event_type: str) -> None:
    _registry.pop((provider, event_type), None)


def registered() -> dict[tuple[str, str], Handler]:
    return dict(_registry)
