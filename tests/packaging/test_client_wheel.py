"""The Python client's own wheel (clients/python, `idemdash-client`), built by docs/install.md's
build block, installed alone into a fresh virtual environment as that page says: no Django
comes with it, and a worker script using it (the sync client and the async one, from
outside the checkout) runs its steps once against a live server."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from idemdash.core.clients import create_token
from receipts.models import Receipt
from tests.packaging.host import INSTALL, new_venv, run, run_block

pytestmark = [pytest.mark.slow, pytest.mark.packaging, pytest.mark.timeout(420)]

WORKER = '''\
import asyncio, importlib.util, json, sys

import idemdash_client
from idemdash_client import AsyncIdempotencyClient, IdempotencyClient, IdempotencyKeyReused, current, make_key

url, token = sys.argv[1:3]
effects = []


def send(lead):
    effects.append(("sync", lead, current().downstream_key))
    return {"sent": lead}


async def asend(lead):
    effects.append(("async", lead, current().downstream_key))
    await asyncio.sleep(0.3)  # the other callers arrive while it runs
    return {"sent": lead}


with IdempotencyClient(url, token) as idem:
    sync = [idem.run_once(make_key("welcome", "lead-1"), "email.send", send, "lead-1") for _ in range(2)]
    try:
        idem.claim(make_key("welcome", "lead-1"), "email.send", {"another": "request"})
        mismatch = None
    except IdempotencyKeyReused as error:
        mismatch = error.type


async def main():
    async with AsyncIdempotencyClient(url, token) as idem:
        return await asyncio.gather(*(idem.run_once("welcome:lead-2", "email.send", asend, "lead-2") for _ in range(5)))


print(json.dumps({
    "client": idemdash_client.__file__,
    "django": importlib.util.find_spec("django") is not None,
    "sync": sync,
    "async": asyncio.run(main()),
    "mismatch": mismatch,
    "effects": effects,
}))
'''


@pytest.fixture(scope="module")
def client_venv(checkout, client_wheel, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("client-wheel")
    venv = new_venv(root / "venv")
    run_block(INSTALL["client"], venv, checkout=checkout, cwd=root)
    return venv


def test_the_client_wheel_holds_only_the_client(client_wheel):
    with zipfile.ZipFile(client_wheel) as archive:
        packages = {name.split("/")[0] for name in archive.namelist() if not name.split("/")[0].endswith(".dist-info")}
        metadata = archive.read("idemdash_client-0.1.0.dist-info/METADATA").decode()
    assert packages == {"idemdash_client"}
    requires = sorted(line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:"))
    assert [r.split("<")[0].split(">")[0] for r in requires] == ["httpx", "rfc8785"]


def test_the_client_installs_without_django(client_venv):
    listing = json.loads(run(client_venv / "bin" / "pip", "list", "--format", "json"))
    installed = {p["name"].lower() for p in listing}
    assert {"idemdash-client", "httpx", "rfc8785"} <= installed
    assert not installed & {"django", "idemdash", "asgiref", "sqlparse"}


def test_a_worker_on_the_installed_client_runs_each_step_once(client_venv, live_server, transactional_db, tmp_path):
    _, token = create_token("wheel-worker")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV")}
    out = json.loads(run(client_venv / "bin" / "python", script, live_server.url, token, cwd=tmp_path, env=env))

    assert "/site-packages/idemdash_client/" in out["client"] and out["django"] is False
    assert out["sync"] == [{"sent": "lead-1"}] * 2
    assert out["async"] == [{"sent": "lead-2"}] * 5
    assert out["mismatch"] == "urn:idemdash:problem:idempotency-key-reused"
    receipts = {r.key: r for r in Receipt.objects.all()}
    assert {key: (r.status, r.attempts) for key, r in receipts.items()} == {
        "welcome:lead-1": ("completed", 1), "welcome:lead-2": ("completed", 1),
    }
    # One effect per key, each under the downstream key the server handed out.
    assert sorted((kind, lead) for kind, lead, _ in out["effects"]) == [("async", "lead-2"), ("sync", "lead-1")]
    assert all(key.startswith("idemdash-") for _, _, key in out["effects"])
