from __future__ import annotations

import pytest

from webhooks.handlers import handler_for, registered, unregister, webhook_handler


def test_a_handler_is_found_by_provider_and_type(registry):
    def handle(event) -> None: ...

    registry("stripe", "invoice.paid", handle)
    assert handler_for("stripe", "invoice.paid") is handle
    assert handler_for("shopify", "invoice.paid") is None
    assert handler_for("stripe", "invoice.created") is None


def test_a_wildcard_handler_catches_the_types_without_their_own(registry):
    def anything(event) -> None: ...

    def paid(event) -> None: ...

    registry("standard", "*", anything)
    registry("standard", "invoice.paid", paid)
    assert handler_for("standard", "user.created") is anything
    assert handler_for("standard", "invoice.paid") is paid


def test_a_second_handler_for_one_type_is_refused(registry):
    def first(event) -> None: ...

    def second(event) -> None: ...

    registry("stripe", "x.y", first)
    with pytest.raises(ValueError, match="already has a handler"):
        webhook_handler("stripe", "x.y")(second)
    webhook_handler("stripe", "x.y")(first)  # registering the same function again is harmless


def test_unregistering_an_unknown_handler_is_harmless(registry):
    def paid(event) -> None: ...

    registry("stripe", "invoice.paid", paid)
    before = registered()
    unregister("stripe", "never.registered")  # no KeyError
    assert registered() == before
    assert handler_for("stripe", "invoice.paid") is paid


def test_unregistering_a_handler_removes_only_that_handler(registry):
    def paid(event) -> None: ...

    def created(event) -> None: ...

    registry("stripe", "invoice.paid", paid)
    registry("stripe", "invoice.created", created)
    unregister("stripe", "invoice.paid")
    assert handler_for("stripe", "invoice.paid") is None
    assert handler_for("stripe", "invoice.created") is created
