"""The models the core declares for every app are the `idemdash.core` app's, and the
migrations build exactly what the models say."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.core.management import call_command

from idemdash.core.models import ApiClient, AuditEntry, BulkItem, BulkRun, Rollup


@pytest.mark.parametrize("model", [ApiClient, AuditEntry, BulkItem, BulkRun, Rollup])
def test_a_shared_model_is_the_core_apps(model):
    assert apps.get_model("idemdash_core", model.__name__) is model
    assert model._meta.db_table == f"idemdash_core_{model._meta.model_name}"


@pytest.mark.django_db
def test_the_models_need_no_migration():
    # Exits with status 1 when a model differs from what the migrations build.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
