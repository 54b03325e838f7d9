"""A host project written as plain Django and Django Ninja projects are (tests/packaging/plain_host/:
function views and a class-based view, some protected by `receipts.decorators.idempotent` and a
refund not, `async def` views, a Ninja router with one operation protected by
`receipts.ninja.idempotent` and one not, callers authenticated by a gateway's header through
Django's `RemoteUserMiddleware`), with idemdash installed from the built wheel with its `ninja`
and `asgi` extras and the blocks of docs/host-project.md added as written (the observer among
them), served by uvicorn with two worker processes on 127.0.0.1.

What it proves of write-route coverage (docs/coverage.md) in such a host: the command's table
names every write route with the operation that protects it or none, and no read-only route;
`--fail-unprotected` fails on a pattern that covers an unprotected route only; and the
observer, writing from the server's processes, counts exactly one would-be duplicate for each
unprotected route sent the same body twice by the same caller (sync, Ninja and async alike),
neither another body nor another caller's, nor a protected route's replay.

And of retries under a fresh key (docs/http-contract.md) with the paydesk's RECEIPTS_OPERATIONS:
a payout sent again under a new key runs again and is counted as one fresh-key retry; a
capture, a charge and a transfer (sync, async and Ninja) sent again so are answered 409 naming
the first key, run once, and replay when sent with it; another amount is never refused.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

from tests.packaging.host import GUIDE, Database, free_port, fresh_key_retry, serving
from tests.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.packaging, pytest.mark.timeout(300)]

PLAIN_HOST = Path(__file__).parent / "plain_host"

# Every write route of the paydesk, and what protects it ("" for nothing); its read-only routes
# (the payment list, the status view, a charge's detail, the Ninja balance) are not among them.
WRITE_ROUTES = {
    ("POST", "payments/capture/"): ("function", "payments.capture"),
    ("POST", "payments/<int:pk>/refund/"): ("function", ""),
    ("POST", "payments/payouts/"): ("class", "payouts.create"),
    ("POST", "payments/charges/"): ("async function", "charges.create"),
    ("POST", "payments/charges/<int:pk>/void/"): ("async function", ""),
    ("POST", "api/payments/transfers"): ("Ninja", "transfers.create"),
    ("POST", "api/payments/transfers/<transfer_id>/reverse"): ("Ninja", ""),
}
# Each unprotected route, a URL of it and a body to send there twice.
UNPROTECTED = {
    "payments/<int:pk>/refund/": ("/payments/7/refund/", {"amount": 500}),
    "payments/charges/<int:pk>/void/": ("/payments/charges/3/void/", {"reason": "duplicate"}),
    "api/payments/transfers/<transfer_id>/reverse": ("/api/payments/transfers/4/reverse", {"amount": 5, "to": "bob"}),
}
PROTECTED = {
    "/payments/capture/": {"amount": 500},
    "/payments/payouts/": {"amount": 900},
    "/payments/charges/": {"amount": 300},
    "/api/payments/transfers": {"amount": 5, "to": "bob"},
}
# The protected routes whose operations refuse a fresh-key retry (the paydesk's RECEIPTS_OPERATIONS).
REFUSED = {
    "/payments/capture/": "payments.capture",
    "/payments/charges/": "charges.create",
    "/api/payments/transfers": "transfers.create",
}


class Paydesk:
    """The paydesk, copied from tests/packaging/plain_host with the guide's blocks appended."""

    def __init__(self, venv: Path, root: Path, database: Database) -> None:
        self.venv, self.root = venv, root
        self.project = root / "paydesk"
        shutil.copytree(PLAIN_HOST, self.project, ignore=shutil.ignore_patterns("__pycache__", "README.md"))
        with open(self.project / "paydesk" / "settings.py", "a") as settings:
            for name in ("settings", "observe"):
                language, code = GUIDE[name]
                assert language == "python", name
                settings.write(f"\n# --- added as docs/host-project.md says: {name} ---\n{code}")
        self.env = {
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(root),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PAYDESK_SECRET_KEY": secrets.token_urlsafe(50),
            "PAYDESK_DATABASE": json.dumps(database.django),
        }

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([str(self.venv / "bin" / "python"), "manage.py", *args], cwd=self.project, env=self.env,
                              capture_output=True, text=True, timeout=300)
        assert not check or done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
        return done

    def coverage(self) -> dict[tuple[str, str], dict]:
        document = json.loads(self.manage("idempotency_coverage", "--json").stdout)
        return {(r["method"], r["path"]): r for r in document["routes"]}

    def serve(self) -> AbstractContextManager[str]:
        """uvicorn with two worker processes on a free port, as its base URL."""
        port = free_port()
        return serving([str(self.venv / "bin" / "uvicorn"), "paydesk.asgi:application", "--host", "127.0.0.1", "--port",
                        str(port), "--workers", "2", "--lifespan", "off", "--timeout-graceful-shutdown", "2"],
                       port, self.project, self.env, self.root / "uvicorn.log", "/payments/status/")


def post(base: str, user: str, path: str, body: dict, key: str | None = None) -> httpx.Response:
    """One call as `user`, whom the gateway authenticated, on a connection of its own (so that
    the server's two processes share the calls, and each writes the notes of its own)."""
    headers = {"X-Authenticated-User": user, **({"Idempotency-Key": key} if key else {})}
    return httpx.post(base + path, json=body, headers=headers, timeout=30)


def test_the_coverage_of_a_plain_django_ninja_and_async_host_and_its_unprotected_duplicates(dashboard_venv, tmp_path,
                                                                                           database):
    paydesk = Paydesk(dashboard_venv, tmp_path, database)
    paydesk.manage("migrate", "--noinput")
    routes = paydesk.coverage()
    assert {route: (r["kind"], r["operation"]) for route, r in routes.items()} == WRITE_ROUTES
    assert all(r["protected"] == bool(r["operation"]) for r in routes.values())

    # In a host's CI: a pattern that covers an unprotected route fails, naming it; one that
    # covers only protected routes passes.
    failed = paydesk.manage("idempotency_coverage", "--fail-unprotected", "/payments/*", check=False)
    assert failed.returncode == 1
    assert "POST /payments/<int:pk>/refund/" in failed.stderr and "POST /payments/charges/<int:pk>/void/" in failed.stderr
    failed = paydesk.manage("idempotency_coverage", "--fail-unprotected", "/api/*", check=False)
    assert failed.returncode == 1 and "POST /api/payments/transfers/<transfer_id>/reverse" in failed.stderr
    passed = paydesk.manage("idempotency_coverage", "--fail-unprotected", "/payments/capture/", "--fail-unprotected",
                            "payments:payouts", "--fail-unprotected", "/payments/charges/", "--fail-unprotected",
                            "/api/payments/transfers", check=False)
    assert passed.returncode == 0, passed.stderr

    with paydesk.serve() as base:
        for url, body in UNPROTECTED.values():
            # Alice's call, her retry of it, her other call; Bob's call with her first body.
            for user, sent in (("alice", body), ("alice", body), ("alice", {**body, "note": "another"}), ("bob", body)):
                answer = post(base, user, url, sent)
                assert answer.status_code == 200, answer.text
        firsts = {}
        for url, body in PROTECTED.items():
            first = post(base, "alice", url, body, key=f"alice{url}")
            assert first.status_code == 201, first.text
            firsts[url] = first.json()
            replay = post(base, "alice", url, body, key=f"alice{url}")
            assert replay.status_code == 201 and replay.headers["Idempotent-Replayed"] == "true"

        # The flushers write in the server's processes, every 2 s: wait for all twelve notes.
        def noted() -> dict | None:
            found = paydesk.coverage()
            return found if all(found[("POST", path)]["requests"] == 4 for path in UNPROTECTED) else None

        routes = until(noted, "the observer's notes of the twelve unprotected calls", within=60, every=0.5)

        # Alice's client timed out and sent each request again under a new key. Her payout
        # (the default policy) ran again; her capture, charge and transfer ("refuse") were
        # answered with the key she first used, and sent with it they replay the first result.
        again = post(base, "alice", "/payments/payouts/", PROTECTED["/payments/payouts/"], key="alice-payout-again")
        assert again.status_code == 201 and "Idempotent-Replayed" not in again.headers
        first_seen = {}
        for url in REFUSED:
            refused = fresh_key_retry(post(base, "alice", url, PROTECTED[url], key=f"alice{url}-again"), f"alice{url}")
            first_seen[refused["first_key"]] = refused["first_seen_at"]
            replay = post(base, "alice", url, PROTECTED[url], key=refused["first_key"])
            assert replay.status_code == 201 and replay.headers["Idempotent-Replayed"] == "true"
            assert replay.json() == firsts[url]
            # Another amount is another request, under a key of its own.
            other = post(base, "alice", url, {**PROTECTED[url], "amount": PROTECTED[url]["amount"] + 1},
                         key=f"alice{url}-other")
            assert other.status_code == 201 and "Idempotent-Replayed" not in other.headers

    assert {path: routes[("POST", path)]["duplicates"] for path in UNPROTECTED} == dict.fromkeys(UNPROTECTED, 1)
    # A protected route's figures are its receipts': one key, its replay the one duplicate.
    assert {(r["keys"], r["duplicates"], r["requests"]) for r in routes.values() if r["protected"]} == {(1, 1, None)}
    # The observer noted the unprotected calls only, each under its authenticated caller, and
    # the would-be duplicates are Alice's retries.
    seen = json.loads(paydesk.manage("shell", "--no-imports", "-c", (
        "import json; from datetime import timedelta; from django.contrib.auth.models import User; "
        "from django.utils import timezone; from payments.models import Payment; "
        "from receipts import coverage, fresh_keys; from receipts.models import Attempt, ObservedRequest, Receipt; "
        "print(json.dumps({'users': {u.username: u.pk for u in User.objects.all()}, "
        "'notes': sorted({(n.route, n.caller) for n in ObservedRequest.objects.all()}), "
        "'noted': ObservedRequest.objects.count(), "
        "'duplicates': sorted((d['route'], d['caller']) for d in coverage.recent_duplicates()), "
        "'payments': sorted((p.kind, p.amount) for p in Payment.objects.all()), "
        "'fresh_keys': fresh_keys.counts(timezone.now() - timedelta(hours=1)), "
        "'refused_on': sorted(Attempt.objects.filter(outcome='fresh_key_retry').values_list('operation', 'key', 'receipt__key')), "
        "'created': {r.key: r.created_at.isoformat() for r in Receipt.objects.all()}, "
        "'payout_again': [o['key'] for o in fresh_keys.same_request(Receipt.objects.get(key='alice-payout-again'))]}))"
    )).stdout.strip().splitlines()[-1])
    alice, bob = f"user:{seen['users']['alice']}", f"user:{seen['users']['bob']}"
    assert seen["noted"] == 12
    assert seen["notes"] == sorted([path, caller] for path in UNPROTECTED for caller in (alice, bob))
    assert seen["duplicates"] == sorted([path, alice] for path in UNPROTECTED)

    # The host's own payments: each refused request ran once, each other amount once, the
    # payout sent again twice; the payout counted as the one fresh-key retry its operation
    # allowed, named on its receipt, and each refusal logged on its first key's receipt.
    assert [tuple(p) for p in seen["payments"]] == sorted([
        ("capture", 500), ("capture", 501), ("payout", 900), ("payout", 900),
        ("charge", 300), ("charge", 301), ("transfer", 5), ("transfer", 6)])
    assert seen["payout_again"] == ["alice/payments/payouts/"]
    assert seen["fresh_keys"] == {"payouts.create": {"allowed": 1, "refused": 0},
                                  **{operation: {"allowed": 0, "refused": 1} for operation in REFUSED.values()}}
    # Each refusal is logged under the key it came with, on its first key's receipt.
    assert seen["refused_on"] == sorted([operation, f"alice{url}-again", f"alice{url}"] for url, operation in REFUSED.items())
    assert {key: seen["created"][key] for key in first_seen} == first_seen
    # The refused keys made no receipt.
    assert not {f"alice{url}-again" for url in REFUSED} & set(seen["created"])
