"""idemdash/core/bulk.py: `each` (a single-row action over rows, counting the refused ones)
and `many` (the bulk form of an operator action), over a model of the core's own (ApiClient:
revoking a client stands in for an operator action)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Q
from django.utils import timezone

from idemdash.core import bulk
from idemdash.core.clients import ApiClient, create_token

pytestmark = pytest.mark.django_db


class AlreadyRevoked(Exception):
    pass


calls: list[tuple[str, str, Any, str]] = []


def revoke(client: ApiClient, *, actor: str, user: Any = None, reason: str = "") -> ApiClient:
    """Revoke a client unless another revoked it since it was read: compare-and-set on the row."""
    calls.append((client.name, actor, user, reason))
    if ApiClient.objects.filter(pk=client.pk, revoked_at=None).update(revoked_at=timezone.now()) != 1:
        raise AlreadyRevoked(client.name)
    return client


revoke_many = bulk.many(revoke, Q(revoked_at=None), refused=(AlreadyRevoked,))


@pytest.fixture(autouse=True)
def forget_calls():
    calls.clear()


def clients(*names: str) -> list[ApiClient]:
    return [create_token(name)[0] for name in names]


def test_each_acts_on_every_row_in_id_order_and_counts_them():
    clients("c", "a", "b")
    result = bulk.each(ApiClient.objects.all(), lambda c: calls.append((c.name, "", None, "")), refused=())
    assert (result.done, result.skipped) == (3, 0)
    assert [name for name, *_ in calls] == ["c", "a", "b"]


def test_each_counts_a_refused_row_as_skipped_and_goes_on():
    first, _ = clients("a", "b")
    ApiClient.objects.filter(pk=first.pk).update(revoked_at=timezone.now())  # after "the preview"
    result = bulk.each(ApiClient.objects.all(), lambda c: revoke(c, actor="ops"), refused=(AlreadyRevoked,))
    assert (result.done, result.skipped) == (1, 1)


def test_each_lets_an_exception_it_was_not_told_of_through():
    clients("a")
    with pytest.raises(ZeroDivisionError):
        bulk.each(ApiClient.objects.all(), lambda c: 1 / 0, refused=(AlreadyRevoked,))


def test_each_stops_at_its_limit():
    clients("a", "b", "c")
    assert bulk.each(ApiClient.objects.all(), lambda c: None, refused=(), limit=2).done == 2


def test_many_acts_only_on_the_rows_the_action_applies_to_passing_who_and_why():
    a, b, c = clients("a", "b", "c")
    ApiClient.objects.filter(pk=b.pk).update(revoked_at=timezone.now())
    result = revoke_many(ApiClient.objects.all(), actor="ops", user="u", reason="rotated")
    assert (result.done, result.skipped) == (2, 0)
    assert calls == [("a", "ops", "u", "rotated"), ("c", "ops", "u", "rotated")]


def test_many_has_the_defaults_and_the_limit_of_a_bulk_action():
    clients("a", "b", "c")
    assert revoke_many(ApiClient.objects.all(), actor="ops", limit=2).done == 2
    assert calls == [("a", "ops", None, ""), ("b", "ops", None, "")]


def test_many_is_named_for_its_action():
    assert (revoke_many.__name__, revoke_many.__module__) == ("revoke_many", __name__)


