"""manage.py idempotency_coverage: the coverage table, as text or JSON, and a build that fails
on the unprotected routes it names."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.receipts.coverage_urls")]


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("idempotency_coverage", *args, stdout=out)
    return out.getvalue()


def test_the_table_names_each_routes_protection_and_counts_them():
    text = _run()
    lines = {line.split()[0] + " " + line.split()[1]: line for line in text.splitlines()[1:] if line.strip() and "route(s)" not in line}
    assert "order.create" in lines["POST /shop/orders/"]
    assert "unprotected" in lines["DELETE /shop/orders/<int:pk>/refund/"]
    assert text.rstrip().endswith("8 of 18 write route(s) protected.")


def test_json_gives_every_route_with_its_policy_for_scripts():
    document = json.loads(_run("--json"))
    assert document["window"] == "24h"
    create = next(r for r in document["routes"] if r["path"] == "shop/orders/")
    assert (create["method"], create["operation"], create["keys"], create["policy"]["ttl_seconds"]) == (
        "POST", "order.create", 0, 86400)


def test_fail_unprotected_exits_1_naming_the_routes_and_passes_when_all_are_protected():
    with pytest.raises(CommandError, match=r"2 route\(s\) .* POST /shop/orders/<int:pk>/refund/, DELETE /shop/orders/<int:pk>/refund/"):
        _run("--fail-unprotected", "/shop/*")
    _run("--fail-unprotected", "/invoices/", "--fail-unprotected", "shop:create")


def test_fail_unprotected_exits_with_status_1_from_the_shell(capsys):
    with pytest.raises(SystemExit) as exited:
        from django.core.management import ManagementUtility

        # --skip-checks: these routes are a fixture, without the URLs the installed dashboard
        # links to (idemdash.E030 would end the command first).
        ManagementUtility(["manage.py", "idempotency_coverage", "--skip-checks", "--fail-unprotected", "/notes/"]).execute()
    assert exited.value.code == 1
    assert "POST /notes/" in capsys.readouterr().err
