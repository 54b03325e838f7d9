"""The TypeScript client (clients/typescript) built as `npm run build` builds it and tested
with `node --test`: its keys against the shared vectors, its error classes against the
problem types table, and the client and the seed workflow against a live server.

Skipped, saying why, only when node or npm is missing (.ci/run installs them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from receipts.auth import create_token

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
NODE, NPM = shutil.which("node"), shutil.which("npm")

pytestmark = pytest.mark.skipif(not (NODE and NPM), reason="node and npm are needed to build and test clients/typescript")


def run(argv: list[str], timeout: float, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=PACKAGE, capture_output=True, text=True, timeout=timeout, env={**os.environ, **env}
    )


@pytest.fixture(scope="module")
def built() -> Path:
    """node_modules as package-lock.json pins it (`npm ci`, only when the lock changed), then
    both builds: the package's dist/ and the examples'."""
    installed = PACKAGE / "node_modules" / ".package-lock.json"
    lock = PACKAGE / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        result = run([NPM, "ci", "--no-audit", "--no-fund"], timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    for script in ("build", "build:examples"):
        result = run([NPM, "run", script], timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    return PACKAGE


def node_test(files: list[str], timeout: float = 240, **env: str) -> str:
    result = run([NODE, "--test", *files], timeout=timeout, **env)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    return result.stdout


def counts(tap: str) -> dict[str, int]:
    return {name: int(n) for name, n in re.findall(r"^# (tests|pass|fail|skipped) (\d+)$", tap, re.M)}


def test_the_build_produces_what_package_json_exports(built):
    import json

    package = json.loads((built / "package.json").read_text())
    assert package["type"] == "module" and not package.get("dependencies")
    for target in package["exports"]["."].values():
        assert (built / target).is_file(), target
    assert (built / package["types"]).read_text().count("export") > 5


def test_its_keys_match_pythons_and_every_problem_type_has_its_error_class(built):
    tap = node_test(["test/keys.test.js", "test/errors.test.js"])
    assert counts(tap)["fail"] == 0 and counts(tap)["skipped"] == 0 and counts(tap)["pass"] > 60


def test_the_client_and_the_seed_workflow_against_a_live_server(built, live_server, transactional_db, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so lapses take a second, not 15
    settings.RECEIPTS_OPERATIONS = {"ledger.*": {"on_failure": "burn"}}
    _, token = create_token("typescript")
    tap = node_test(
        ["test/client.test.js", "test/agent-workflow.test.js"], IDEMDASH_URL=live_server.url, IDEMDASH_TOKEN=token
    )
    assert counts(tap)["fail"] == 0 and counts(tap)["skipped"] == 0 and counts(tap)["pass"] >= 18, tap[-3000:]
