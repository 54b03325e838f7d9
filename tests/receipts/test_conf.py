from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from receipts.conf import DEFAULTS, policy_for


@pytest.mark.parametrize(
    "operation",
    ["payment.create", "payments.capture", "refund.issue", "refunds.create", "payout.send", "payouts.batch",
     "charge.create", "charges.capture", "capture.run", "captures.create", "invoice.pay", "invoices.finalize",
     "transfer.send", "transfers.create"],
)
def test_the_usual_money_nouns_singular_and_plural_are_financial_by_default(operation):
    policy = policy_for(operation)
    assert policy.financial and policy.ttl == timedelta(days=7)
    assert policy.financial_pattern == operation.split(".")[0] + ".*"
    assert policy.rule is None


@pytest.mark.parametrize("operation", ["email.send", "report.build", "paymentmethod.list", "order.create"])
def test_other_operations_get_the_24_hour_default_and_say_that_nothing_matched(operation):
    policy = policy_for(operation)
    assert not policy.financial and policy.ttl == timedelta(hours=24)
    assert policy.as_dict()["matched"] == {"RECEIPTS_OPERATIONS": None, "RECEIPTS_FINANCIAL_OPERATIONS": None}
    assert policy.matched() == "defaults (no pattern matched)"


def test_a_host_project_sets_its_own_financial_patterns_and_exact_names(settings):
    settings.RECEIPTS_FINANCIAL_OPERATIONS = ["billing.*", "ledger.post"]
    assert policy_for("ledger.post").financial_pattern == "ledger.post"
    assert policy_for("billing.charge").financial
    assert not policy_for("payment.create").financial  # the defaults were replaced


def test_an_exact_name_wins_over_an_earlier_pattern(settings):
    settings.RECEIPTS_OPERATIONS = {
        "report.*": {"ttl_seconds": 60},
        "report.build": {"ttl_seconds": 3600, "lease_seconds": 300, "on_failure": "burn"},
    }
    policy = policy_for("report.build")
    assert policy.rule == "report.build"
    assert policy.as_dict() == {
        "ttl_seconds": 3600, "lease_seconds": 300, "financial": False, "on_failure": "burn", "after_crash": "rerun",
        "compact_after_seconds": None, "fresh_key": "allow",
        "matched": {"RECEIPTS_OPERATIONS": "report.build", "RECEIPTS_FINANCIAL_OPERATIONS": None},
    }
    assert policy_for("report.send").ttl == timedelta(seconds=60)


def test_a_rule_can_say_an_operation_matching_a_financial_pattern_is_not_financial(settings):
    settings.RECEIPTS_OPERATIONS = {"payment.preview": {"financial": False}}
    policy = policy_for("payment.preview")
    assert not policy.financial and policy.ttl == timedelta(hours=24)
    assert policy.matched() == "RECEIPTS_OPERATIONS['payment.preview']"


def test_a_rule_keeps_the_financial_default_of_its_pattern(settings):
    settings.RECEIPTS_OPERATIONS = {"payments.*": {"on_failure": "burn"}}
    policy = policy_for("payments.capture")
    assert policy.financial and policy.burn_on_failure
    assert policy.matched() == "RECEIPTS_OPERATIONS['payments.*'], RECEIPTS_FINANCIAL_OPERATIONS 'payments.*'"


def test_a_bad_failure_policy_names_the_setting(settings):
    settings.RECEIPTS_OPERATIONS = {"x.*": {"on_failure": "explode"}}
    with pytest.raises(ImproperlyConfigured, match=r"RECEIPTS_OPERATIONS\['x\.\*'\]"):
        policy_for("x.y")


def test_no_setting_is_required_beyond_installing_the_app(settings):
    for name in DEFAULTS:
        if hasattr(settings, name):
            delattr(settings, name)
    policy = policy_for("payments.capture")
    assert policy.financial and policy.ttl == timedelta(days=7) and policy.lease == timedelta(seconds=30)


def test_a_rule_without_a_ttl_makes_the_operation_permanent(settings):
    settings.RECEIPTS_OPERATIONS = {"email.welcome": {"ttl_seconds": None}}
    policy = policy_for("email.welcome")
    assert policy.permanent and policy.ttl is None and policy.as_dict()["ttl_seconds"] is None
    assert policy.expires_at(timezone.now()) is None
    assert not policy_for("email.send").permanent


@pytest.mark.parametrize("ttl", [0, -1, "3600", 1.5, True])
def test_a_ttl_that_is_not_a_positive_number_of_seconds_names_the_setting(settings, ttl):
    settings.RECEIPTS_OPERATIONS = {"x.*": {"ttl_seconds": ttl}}
    with pytest.raises(ImproperlyConfigured, match=r"RECEIPTS_OPERATIONS\['x\.\*'\]\['ttl_seconds'\]"):
        policy_for("x.y")


def test_after_crash_defaults_to_rerun_and_may_hold(settings):
    settings.RECEIPTS_OPERATIONS = {"email.*": {"after_crash": "hold"}}
    assert policy_for("email.send").after_crash == "hold"
    assert policy_for("sms.send").after_crash == "rerun"
    assert policy_for("email.send").as_dict()["after_crash"] == "hold"


@pytest.mark.parametrize("rule", [
    {"after_crash": "retry"},
    {"after_crash": "rerun", "reconcile": "tests.receipts.test_store.reconcile_found"},
])
def test_a_bad_after_crash_policy_names_the_setting(settings, rule):
    settings.RECEIPTS_OPERATIONS = {"x.*": rule}
    with pytest.raises(ImproperlyConfigured, match=r"RECEIPTS_OPERATIONS\['x\.\*'\]"):
        policy_for("x.y")


@pytest.mark.parametrize("misspelt", ["on_falure", "single_transaction"])
def test_a_rule_with_a_setting_it_does_not_have_is_refused_with_the_ones_it_has(settings, misspelt):
    settings.RECEIPTS_OPERATIONS = {"x.*": {misspelt: "burn"}}
    with pytest.raises(ImproperlyConfigured, match=rf"RECEIPTS_OPERATIONS\['x\.\*'\] has no setting '{misspelt}': it takes after_crash, "):
        policy_for("x.y")
