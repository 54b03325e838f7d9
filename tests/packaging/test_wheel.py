"""The built wheel holds the apps and none of the developer tooling (idemdash/devtools/:
the demo, simulator, seeder, bench and their fixtures), which pyproject.toml excludes."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from tests.packaging.source import copy_source

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("wheel")
    source = copy_source(root)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", root / "dist", source],
        capture_output=True, text=True, timeout=200,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = (root / "dist").glob("idemdash-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_holds_the_apps(wheel_files):
    assert {
        "idemdash/settings.py",
        "idemdash/core/schedules.py",
        "idemdash/dashboard/apps.py",
        "idemdash/dashboard/migrations/0004_demo_switch.py",
        "idemdash/dashboard/templatetags/idemdash_tags.py",
        "idemdash/dashboard/views/receipts.py",
        "idemdash/worker/apps.py",
        "idemdash/worker/migrations/0001_cluster_heartbeat.py",
        "receipts/store.py",
        "receipts/management/commands/install_schedules.py",
        "webhooks/demo_handlers.py",
    } <= set(wheel_files)


def test_the_wheel_holds_no_developer_tooling(wheel_files):
    tooling = [
        name for name in wheel_files
        if name.startswith("idemdash/devtools/")
        or any(word in name for word in ("bench", "simulat", "seed", "demo_env", "fixtures", "agent_workflow"))
    ]
    assert tooling == []
