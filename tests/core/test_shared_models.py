"""The models the core declares for every app stay the receipts app's: the same tables,
content types and permissions, and no migration to write for the move."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission
from django.core.management import call_command

from idemdash.core.audit import AuditEntry
from idemdash.core.clients import ApiClient
from idemdash.core.rollup import Rollup

SHARED = [(AuditEntry, "receipts_auditentry"), (ApiClient, "receipts_apiclient"), (Rollup, "receipts_rollup")]


@pytest.mark.parametrize(("model", "table"), SHARED)
def test_a_shared_model_is_the_receipts_apps(model, table):
    assert model._meta.label == f"receipts.{model.__name__}"
    assert model._meta.db_table == table
    assert apps.get_model("receipts", model.__name__) is model


@pytest.mark.django_db
@pytest.mark.parametrize(("model", "table"), SHARED)
def test_its_permissions_are_the_receipts_apps(model, table):
    codename = f"view_{model._meta.model_name}"
    assert Permission.objects.filter(content_type__app_label="receipts", codename=codename).exists()


@pytest.mark.django_db
def test_the_models_need_no_migration():
    # Exits with status 1 when a model differs from what the migrations build.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
