from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_it_prepares_a_fresh_var_dir_for_the_production_stack_and_is_harmless_to_repeat(tmp_path):
    var = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "DEBUG"}}
    # As `make demo` runs it: the production settings plus the devtools app.
    env.update(IDEMDASH_VAR_DIR=str(var), IDEMDASH_ADMIN_PASSWORD="demo-setup-test-pw",
               DJANGO_SETTINGS_MODULE="idemdash.devtools.settings")
    for expected in ("created admin", "admin user exists"):
        done = subprocess.run([sys.executable, "manage.py", "demo_setup"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-2000:]
        assert expected in done.stdout
    manifest = json.loads((var / "static" / "staticfiles.json").read_text())["paths"]
    assert {"css/idemdash.css", "vendor/plotly.min.js"} <= set(manifest)
    assert (var / "static" / (manifest["vendor/plotly.min.js"] + ".gz")).exists()
    with sqlite3.connect(var / "idemdash.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM auth_user WHERE username = 'admin' AND is_superuser").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM django_q_schedule").fetchone()[0] >= 5
