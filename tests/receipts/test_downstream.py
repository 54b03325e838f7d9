from datetime import UTC, datetime, timedelta, timezone

from receipts.downstream import downstream_key

BEGAN = datetime(2026, 11, 25, 12, 0, 0, 123456, tzinfo=UTC)


def test_the_same_claim_gives_the_same_downstream_key_every_time():
    assert downstream_key("client:a", "order-1", BEGAN) == downstream_key("client:a", "order-1", BEGAN)
    # The same instant, as another database or time zone hands it back.
    elsewhere = BEGAN.astimezone(timezone(timedelta(hours=-5)))
    assert downstream_key("client:a", "order-1", elsewhere) == downstream_key("client:a", "order-1", BEGAN)


def test_another_caller_another_key_or_a_new_life_gives_another_downstream_key():
    first = downstream_key("client:a", "order-1", BEGAN)
    assert downstream_key("client:b", "order-1", BEGAN) != first
    assert downstream_key("client:a", "order-2", BEGAN) != first
    assert downstream_key("client:a", "order-1", BEGAN + timedelta(microseconds=1)) != first
    # Scope and key cannot be shifted into each other.
    assert downstream_key("client:a\n", "order-1", BEGAN) != downstream_key("client:a", "\norder-1", BEGAN)


def test_a_downstream_key_fits_any_provider_and_shows_nothing_of_the_caller():
    k = downstream_key("user:42", "x" * 255, BEGAN)
    assert k.startswith("idemdash-") and len(k) == 41
    assert all(c in "0123456789abcdef" for c in k[len("idemdash-"):])
