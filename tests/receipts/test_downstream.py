from datetime import UTC, datetime, timedelta

from receipts.downstream import downstream_key

BEGAN = datetime(2026, 11, 25, 12, 0, 0, 123456, tzinfo=UTC)


def test_the_same_claim_gives_the_same_downstream_key_every_time():
    assert downstream_key("client:a", "order-1", BEGAN) == downstream_key("client:a", "order-1", BEGAN)
    assert downstream_key("client:a", "order-1", BEGAN).startswith("idem_")


def test_another_caller_another_key_or_a_new_life_gives_another_downstream_key():
    first = downstream_key("client:a", "order-1", BEGAN)
    assert downstream_key("client:b", "order-1", BEGAN) != first
    assert downstream_key("client:a", "order-2", BEGAN) != first
    assert downstream_key("client:a", "order-1", BEGAN + timedelta(microseconds=1)) != first


def test_a_downstream_key_fits_any_provider():
    k = downstream_key("client:a", "x" * 255, BEGAN)
    assert len(k) == 40 and k.replace("_", "").isalnum() and k == k.lower()
