"""The devtools settings are the production settings plus the devtools app and its URLconf,
and the bench's are those plus the bench's own knobs: `make demo` and `make bench` run the production stack.
Each settings module is loaded in a subprocess of its own, as loading one changes shared
dictionaries of the other (the bench's LOGGING and DATABASES)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# Every setting (the upper-case names; a star import leaves out the private ones such as
# `_TRUE`), as JSON: sets sorted, as their order changes from one process to the next;
# anything else JSON lacks by its repr.
DUMP = """
import importlib, json, sys
module = importlib.import_module(sys.argv[1])
def plain(value):
    return sorted(value, key=repr) if isinstance(value, (set, frozenset)) else repr(value)
names = {name: json.dumps(getattr(module, name), default=plain, sort_keys=True) for name in dir(module)
         if name.isupper() and not name.startswith('_')}
print(json.dumps({"names": names, "apps": list(module.INSTALLED_APPS)}))
"""


KEY = secrets.token_urlsafe(50)


def load(module: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "DEBUG"}}
    env["SECRET_KEY"] = KEY
    done = subprocess.run([sys.executable, "-c", DUMP, module], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def differences(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    return {name for name in a["names"].keys() | b["names"].keys() if a["names"].get(name) != b["names"].get(name)}


def test_the_devtools_settings_are_productions_plus_the_devtools_app_and_urls_only():
    production, devtools = load("idemdash.settings"), load("idemdash.devtools.settings")
    assert differences(production, devtools) == {"INSTALLED_APPS", "ROOT_URLCONF"}
    assert devtools["apps"] == [*production["apps"], "idemdash.devtools"]


def test_the_bench_settings_are_the_devtools_settings_plus_the_bench_and_its_knobs():
    devtools, bench = load("idemdash.devtools.settings"), load("idemdash.devtools.bench.settings")
    assert differences(devtools, bench) <= {"INSTALLED_APPS", "ROOT_URLCONF", "DATABASES", "STORAGES", "LOGGING",
                                            "MIDDLEWARE", "OBSERVER"}
    added = bench["apps"][len(devtools["apps"]):]
    assert bench["apps"][: len(devtools["apps"])] == devtools["apps"]
    assert added[0] == "idemdash.devtools.bench" and set(added[1:]) <= {"rest_framework", "drf_idempotency"}


def test_the_observed_bench_settings_are_the_bench_settings_with_the_observer_kept():
    # Scenario 14 compares the bench's server with one of these; what it measures is the observer.
    bench, observed = load("idemdash.devtools.bench.settings"), load("idemdash.devtools.bench.observed_settings")
    assert differences(bench, observed) == {"MIDDLEWARE"}
    bare, kept = (json.loads(s["names"]["MIDDLEWARE"]) for s in (bench, observed))
    observer = json.loads(bench["names"]["OBSERVER"])
    assert observer not in bare
    assert kept[kept.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1] == observer
    assert [m for m in kept if m != observer] == bare


def test_production_settings_never_name_the_devtools():
    assert not [app for app in load("idemdash.settings")["apps"] if app.startswith("idemdash.devtools")]


REGISTERED = """
import django
django.setup()
from django.contrib import admin
from webhooks.handlers import registered
demo = {("stripe", "checkout.session.completed"), ("stripe", "payment_intent.succeeded"),
        ("shopify", "orders/create"), ("shopify", "refunds/create")}
print(len(demo & set(registered())), sorted(m.__name__ for m in admin.site._registry if m._meta.app_label == "devtools"))
"""


@pytest.mark.parametrize("module,expected", [("idemdash.settings", "0 []"),
                                             ("idemdash.devtools.settings", "4 ['DemoSwitch', 'Fulfilment', 'ShopifyOrder']")])
def test_only_the_devtools_settings_register_the_demos_handlers_and_admin(module, expected):
    env = {k: v for k, v in os.environ.items() if k != "DEBUG"}
    env.update(SECRET_KEY=KEY, DJANGO_SETTINGS_MODULE=module)
    done = subprocess.run([sys.executable, "-c", REGISTERED], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == expected
