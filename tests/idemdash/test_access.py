from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from idemdash.dashboard.access import ensure_groups

pytestmark = pytest.mark.django_db


def perms(group: str) -> set[str]:
    return set(Group.objects.get(name=group).permissions.values_list("codename", flat=True))


def test_migrate_creates_the_viewers_and_operators_groups():
    assert perms("viewers") == {"view_dashboard"}
    assert perms("operators") == {"view_dashboard", "operate"}


def test_ensuring_the_groups_twice_is_harmless():
    ensure_groups()
    ensure_groups()
    assert Group.objects.filter(name__in=["viewers", "operators"]).count() == 2
    assert perms("operators") == {"view_dashboard", "operate"}


def test_a_viewer_may_see_but_not_operate(viewer, operator, django_user_model):
    assert viewer.has_perm("idemdash_dashboard.view_dashboard") and not viewer.has_perm("idemdash_dashboard.operate")
    assert operator.has_perm("idemdash_dashboard.operate")
    admin = django_user_model.objects.create_superuser("root", "r@x", "pw")
    assert admin.has_perm("idemdash_dashboard.operate")
