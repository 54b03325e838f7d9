"""The settings helpers: every environment variable goes through one of these, so a typo in a
deployment fails at start-up naming the variable instead of falling back to a default.

`idemdash.settings` is already imported by pytest-django; importing the helpers from it does
not execute the module again."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from idemdash.settings import envbool, envint, envlist

NAME = "IDEMDASH_TEST_SETTING"


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)


# --- envbool ------------------------------------------------------------------------------------


@pytest.mark.parametrize("default", [True, False])
def test_envbool_is_the_default_when_the_variable_is_unset(default):
    assert envbool(NAME, default) is default


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", "yes", "On", " true "])
def test_envbool_reads_the_true_spellings(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    assert envbool(NAME, False) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "off", "", "  "])
def test_envbool_reads_the_false_spellings_and_empty_as_false(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    assert envbool(NAME, True) is False


@pytest.mark.parametrize("raw", ["2", "enabled", "y", "tru"])
def test_envbool_refuses_anything_else_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    with pytest.raises(ImproperlyConfigured, match=rf"{NAME} must be a boolean .*{raw!r}"):
        envbool(NAME, True)


# --- envint -------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [None, "", "   "])
def test_envint_is_the_default_when_the_variable_is_unset_or_empty(monkeypatch, raw):
    if raw is not None:
        monkeypatch.setenv(NAME, raw)
    assert envint(NAME, 42) == 42


@pytest.mark.parametrize("raw,value", [("7", 7), (" 12 ", 12), ("0", 0), ("+3", 3)])
def test_envint_reads_an_integer(monkeypatch, raw, value):
    monkeypatch.setenv(NAME, raw)
    assert envint(NAME, 42) == value


@pytest.mark.parametrize("raw", ["1.5", "ten", "1e3", "0x10"])
def test_envint_refuses_what_is_not_an_integer_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    with pytest.raises(ImproperlyConfigured, match=rf"{NAME} must be an integer, got {raw!r}"):
        envint(NAME, 42)


def test_envint_refuses_a_value_below_the_minimum_and_accepts_the_minimum(monkeypatch):
    monkeypatch.setenv(NAME, "-1")
    with pytest.raises(ImproperlyConfigured, match=f"{NAME} must be at least 0, got -1"):
        envint(NAME, 42)
    monkeypatch.setenv(NAME, "1")
    with pytest.raises(ImproperlyConfigured, match=f"{NAME} must be at least 2, got 1"):
        envint(NAME, 42, minimum=2)
    monkeypatch.setenv(NAME, "2")
    assert envint(NAME, 42, minimum=2) == 2


def test_envint_does_not_check_the_minimum_against_the_default():
    # The default is the code's own choice; only what the environment says is checked.
    assert envint(NAME, 1, minimum=31) == 1


# --- envlist ------------------------------------------------------------------------------------


def test_envlist_is_the_default_when_the_variable_is_unset():
    default = ["a", "b"]
    assert envlist(NAME, default) is default


@pytest.mark.parametrize("raw,items", [
    ("a.example,b.example", ["a.example", "b.example"]),
    (" a.example , b.example ", ["a.example", "b.example"]),
    ("a.example,,b.example,", ["a.example", "b.example"]),
    ("one", ["one"]),
])
def test_envlist_splits_on_commas_trimming_and_dropping_empty_items(monkeypatch, raw, items):
    monkeypatch.setenv(NAME, raw)
    assert envlist(NAME, ["default"]) == items


@pytest.mark.parametrize("raw", ["", " , "])
def test_an_empty_envlist_is_an_empty_list_not_the_default(monkeypatch, raw):
    # Setting the variable empty is how a deployment turns a default list off.
    monkeypatch.setenv(NAME, raw)
    assert envlist(NAME, ["default"]) == []
