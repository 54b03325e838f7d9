from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from idemdash.devtools.demo_env import write_demo_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("SECRET_KEY", "STRIPE_WEBHOOK_SECRET", "SHOPIFY_WEBHOOK_SECRET")


def _sourced(path: Path, **env: str) -> dict[str, str]:
    script = f'set -a; . "{path}"; set +a; ' + "; ".join(f'echo "${name}"' for name in NAMES)
    base = {k: v for k, v in os.environ.items() if k not in NAMES}
    out = subprocess.run(["sh", "-c", script], env={**base, **env}, capture_output=True, text=True, check=True)
    return dict(zip(NAMES, out.stdout.splitlines(), strict=True))


def test_the_demo_env_is_made_once_private_and_yields_to_values_already_set(tmp_path):
    path = write_demo_env(tmp_path / "var" / "demo.env")
    first = path.read_text()
    assert write_demo_env(path).read_text() == first
    assert (path.stat().st_mode & 0o777) == 0o600

    demo = _sourced(path)
    assert demo["STRIPE_WEBHOOK_SECRET"].startswith("whsec_demo_") and demo["STRIPE_WEBHOOK_SECRET"] in first
    assert demo["SHOPIFY_WEBHOOK_SECRET"].startswith("shpss_demo_")
    assert _sourced(path, STRIPE_WEBHOOK_SECRET="whsec_mine") == {**demo, "STRIPE_WEBHOOK_SECRET": "whsec_mine"}


def test_its_secret_key_is_one_the_production_settings_accept(tmp_path):
    key = _sourced(write_demo_env(tmp_path / "demo.env"))["SECRET_KEY"]
    base = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "DJANGO_SETTINGS_MODULE"}}
    done = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.SECRET_KEY)"], cwd=ROOT,
        env={**base, "SECRET_KEY": key, "DJANGO_SETTINGS_MODULE": "idemdash.settings"},
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == key


def test_a_demo_env_from_before_the_key_gets_one_and_keeps_its_secrets(tmp_path):
    path = tmp_path / "demo.env"
    path.write_text(': "${STRIPE_WEBHOOK_SECRET:=whsec_demo_old}"\n: "${SHOPIFY_WEBHOOK_SECRET:=shpss_demo_old}"\n'
                    "export STRIPE_WEBHOOK_SECRET SHOPIFY_WEBHOOK_SECRET\n")
    demo = _sourced(write_demo_env(path))
    assert demo["STRIPE_WEBHOOK_SECRET"] == "whsec_demo_old" and demo["SHOPIFY_WEBHOOK_SECRET"] == "shpss_demo_old"
    assert len(demo["SECRET_KEY"]) >= 50


def test_it_runs_before_settings_exist_and_prints_the_path(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DJANGO_SETTINGS_MODULE"}}
    done = subprocess.run([sys.executable, "-m", "idemdash.devtools.demo_env"], cwd=ROOT, capture_output=True, text=True,
                          env={**env, "IDEMDASH_VAR_DIR": str(tmp_path)}, timeout=60, check=True)
    assert done.stdout.strip() == str(tmp_path / "demo.env") and "SECRET_KEY" in (tmp_path / "demo.env").read_text()


def test_the_demo_env_lowers_webhook_attempts_and_an_older_file_gets_that_added(tmp_path):
    path = tmp_path / "demo.env"
    path.write_text(': "${STRIPE_WEBHOOK_SECRET:=whsec_demo_old}"\nexport STRIPE_WEBHOOK_SECRET\n')
    write_demo_env(path)
    write_demo_env(path)  # added once
    text = path.read_text()
    assert text.count("WEBHOOKS_MAX_ATTEMPTS:=") == 1 and "whsec_demo_old" in text
    script = f'set -a; . "{path}"; set +a; echo "$WEBHOOKS_MAX_ATTEMPTS $WEBHOOKS_BACKOFF_BASE"'
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBHOOKS_")}
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["3", "5"]
    out = subprocess.run(["sh", "-c", script], env={**env, "WEBHOOKS_MAX_ATTEMPTS": "8"}, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["8", "5"]  # the environment wins
