"""A host project written as DRF projects are (tests/packaging/drf_host/: a custom user model
`accounts.User` from its first migration, JWT authentication with djangorestframework-simplejwt,
an `orders` ViewSet protected by `receipts.drf.idempotent` that enqueues its shipping and its
confirmation email in the outbox, and its `reorder` action left without a key, its own
`base.html` and login page, WhiteNoise), with
idemdash installed from the built wheel and the blocks of docs/host-project.md added as
written, served by gunicorn on 127.0.0.1.

Both ways of running the dashboard beside it:
- inside it, under `/ops/`: two users' JWT calls make receipts, a retried reorder is counted as
  the one would-be duplicate by the observer, an order placed again under a new key is refused
  with 409 naming the first key (whose replay it gets) while a note sent again so runs and is
  counted as a fresh-key retry, and Chromium, logged in on the host's own login
  page as a host operator, shows the dashboard styled and listing the receipts;
- as a separate service: idemdash's own server from its checkout on the host's database,
  with the host's user model named by IDEMDASH_AUTH_USER_MODEL. `migrate` works (and without
  the setting stops before it writes anything), the host's users log in, and the service's
  worker leaves the host's outbox alone unless OUTBOX_DRAIN is set, even then never claiming
  the host's own action; and with the host's own django-q2 cluster on the same schedule table,
  each cluster's scheduler takes only its own schedules.

The dashboard inside the host runs on SQLite: what it proves (the host's login, JWT users'
receipts, the dashboard's own styles and static files through the host's pipeline) does not
depend on the database, and the wheel's PostgreSQL path is the separate service's. The separate
service runs on PostgreSQL (DATABASE_URL), as docs/host-project.md's block gives it: a database
shared by two services and their two clusters' schedulers.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.dashboard.test_browser import SHOTS, browser  # noqa: F401 (the fixture)
from tests.packaging.host import (
    GUIDE, REPO, Database, free_port, fresh_key_retry, marked_blocks, run, run_block, serving,
)
from tests.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.packaging, pytest.mark.timeout(600)]

DRF_HOST = Path(__file__).parent / "drf_host"
OUTBOX_GUIDE = marked_blocks("outbox.md", "guide")
PASSWORD = "shop-password-for-tests"
OPERATOR = "alice"  # the user docs/host-project.md's access block names
REORDER = "api/orders/(?P<pk>[^/.]+)/reorder/$"  # the router's pattern of OrderViewSet.reorder


@pytest.fixture
def shop_venv(dashboard_venv) -> Path:
    """The wheel with its dashboard extra (docs/install.md), and the shop's own requirements
    (tests/packaging/conftest.py)."""
    return dashboard_venv


class Shop:
    """The shop, copied from tests/packaging/drf_host with the guide's blocks appended."""

    def __init__(self, venv: Path, root: Path, database: Database, *, dashboard: bool, worker: bool = False) -> None:
        self.venv, self.root = venv, root
        self.project = root / "shop"
        shutil.copytree(DRF_HOST, self.project, ignore=shutil.ignore_patterns("__pycache__", "README.md"))
        # docs/host-project.md: the receipts app; the outbox (docs/outbox.md) or the whole dashboard.
        blocks = [("settings", GUIDE["settings"])]
        blocks += [("dashboard_settings", GUIDE["dashboard_settings"])] if dashboard else [("outbox", OUTBOX_GUIDE["outbox"])]
        blocks += [("observe", GUIDE["observe"])]
        with open(self.project / "shop" / "settings.py", "a") as settings:
            for name, (language, code) in blocks:
                assert language == "python", name
                settings.write(f"\n# --- added as docs/host-project.md says: {name} ---\n{code}")
            if worker:  # the shop's own django-q2 cluster, on its database (the dashboard's block has one)
                settings.write('\nINSTALLED_APPS += ["django_q"]\nQ_CLUSTER = {"name": "shop", "orm": "default"}\n')
        if dashboard:
            language, code = GUIDE["dashboard_urls"]
            assert language == "python"
            with open(self.project / "shop" / "urls.py", "a") as urls:
                urls.write(f"\n# --- added as docs/host-project.md says: dashboard_urls ---\n{code}")
        self.shipments = root / "shipments.log"
        self.env = {
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(root),
            "PYTHONDONTWRITEBYTECODE": "1",
            "SHOP_SECRET_KEY": secrets.token_urlsafe(50),
            "SHOP_DATABASE": json.dumps(database.django),
            "SHOP_SHIPMENTS": str(self.shipments),
        }

    def manage(self, *args: str) -> str:
        return run(self.venv / "bin" / "python", "manage.py", *args, cwd=self.project, env=self.env, timeout=300)

    def coverage(self) -> dict[tuple[str, str], dict]:
        """`idempotency_coverage --json`'s routes by (method, path)."""
        return {(r["method"], r["path"]): r for r in json.loads(self.manage("idempotency_coverage", "--json"))["routes"]}

    def block(self, name: str) -> str:
        return run_block(GUIDE[name], self.venv, checkout=REPO, cwd=self.project, env=self.env)

    def create_user(self, username: str, **fields: object) -> None:
        self.manage("shell", "--no-imports", "-c", (
            "from django.contrib.auth import get_user_model; "
            f"get_user_model().objects.create_user({username!r}, email={username + '@shop.example'!r}, "
            f"password={PASSWORD!r}, **{fields!r})"
        ))

    def serve(self) -> Iterator[str]:
        """gunicorn with two workers on a free port; yields its base URL."""
        port = free_port()
        with serving([str(self.venv / "bin" / "gunicorn"), "shop.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2",
                      "--threads", "4", "--timeout", "30", "--graceful-timeout", "2"],
                     port, self.project, self.env, self.root / "gunicorn.log", "/accounts/login/") as base:
            yield base


def jwt(client: httpx.Client, username: str) -> dict[str, str]:
    token = client.post("/api/token/", json={"username": username, "password": PASSWORD})
    assert token.status_code == 200, token.text
    return {"Authorization": f"Bearer {token.json()['access']}"}


def place_order(client: httpx.Client, auth: dict[str, str], key: str, sku: str) -> httpx.Response:
    return client.post("/api/orders/", json={"sku": sku, "quantity": 1}, headers={**auth, "Idempotency-Key": key})


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_the_dashboard_inside_a_drf_host_with_jwt_and_a_custom_user_model(shop_venv, tmp_path, database, browser):
    shop = Shop(shop_venv, tmp_path, database, dashboard=True)
    shop.manage("migrate", "--noinput")
    # The installed wheel's coverage of the host's routes: the router's create is protected, the
    # JWT views take writes without a key, Django's own auth views are not listed.
    routes = shop.coverage()
    assert routes[("POST", "api/orders/$")]["operation"] == "orders.create"
    assert not routes[("POST", "api/token/")]["protected"] and not routes[("POST", "api/token/refresh/")]["protected"]
    assert not routes[("POST", REORDER)]["protected"]  # the router's extra action, left without a key
    assert not any(path.startswith(("accounts/", "admin/")) for _, path in routes)
    shop.block("dashboard_static")
    shop.create_user("carol")
    shop.create_user("dave")
    shop.create_user(OPERATOR, is_staff=True)
    shop.block("dashboard_access")

    for base in shop.serve():
        with httpx.Client(base_url=base, timeout=30) as client:
            # Two users with JWTs, one key each, the same key: two receipts, two orders.
            carol, dave = jwt(client, "carol"), jwt(client, "dave")
            first = place_order(client, carol, "order-0001", "TEA-1")
            assert first.status_code == 201, first.text
            replay = place_order(client, carol, "order-0001", "TEA-1")
            assert replay.status_code == 201 and replay.json() == first.json()
            assert replay.headers.get("Idempotent-Replayed") == "true"
            other = place_order(client, dave, "order-0001", "COFFEE-2")
            assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
            assert [o["sku"] for o in client.get("/api/orders/", headers=carol).json()] == ["TEA-1"]
            assert [o["sku"] for o in client.get("/api/orders/", headers=dave).json()] == ["COFFEE-2"]
            # Without a token the API is closed, and so is the dashboard (to the host's login).
            assert client.post("/api/orders/", json={"sku": "X", "quantity": 1},
                               headers={"Idempotency-Key": "anon-1"}).status_code == 401
            closed = client.get("/ops/")
            assert closed.status_code == 302 and closed.headers["location"] == "/accounts/login/?next=/ops/"

            # Carol's reorder, her retry of it and another reorder: the unprotected action ran
            # three times, and the observer counts the retry as the one would-be duplicate.
            reorder = f"/api/orders/{first.json()['id']}/reorder/"
            for quantity in (2, 2, 3):
                assert client.post(reorder, json={"quantity": quantity}, headers=carol).status_code == 201

            # Carol's checkout timed out and her client placed the order again under a new key:
            # refused (the shop's RECEIPTS_OPERATIONS), naming her first key, with which it
            # replays her order. Another body under a new key is another order.
            refused = fresh_key_retry(place_order(client, carol, "order-0002", "TEA-1"), "order-0001")
            replay = place_order(client, carol, refused["first_key"], "TEA-1")
            assert replay.status_code == 201 and replay.json() == first.json()
            assert replay.headers.get("Idempotent-Replayed") == "true"
            assert place_order(client, carol, "order-0003", "TEA-2").status_code == 201
            # The first order once, the three reorders, the other body.
            assert [[o["sku"], o["quantity"]] for o in client.get("/api/orders/", headers=carol).json()] == [
                ["TEA-1", 1], ["TEA-1", 2], ["TEA-1", 2], ["TEA-1", 3], ["TEA-2", 1]]
            # Her note on the order, sent again under a new key: the default policy runs it again.
            notes = f"/api/orders/{first.json()['id']}/notes/"
            for key in ("note-0001", "note-0002"):
                note = client.post(notes, json={"text": "Leave it at the door"}, headers={**carol, "Idempotency-Key": key})
                assert note.status_code == 201 and "Idempotent-Replayed" not in note.headers

        # The flushers write in gunicorn's workers, each every 2 s: wait for the reorders' three
        # notes and the two logins'.
        def noted() -> dict | None:
            found = shop.coverage()
            return found if (found[("POST", REORDER)]["requests"], found[("POST", "api/token/")]["requests"]) == (3, 2) \
                else None

        routes = until(noted, "the observer's notes of the reorders and logins", within=60, every=0.5)
        assert routes[("POST", REORDER)]["duplicates"] == 1
        # Carol's and Dave's logins are other bodies; the orders route, whose replay is the
        # receipt's, is not noted at all.
        assert routes[("POST", "api/token/")]["duplicates"] == 0
        seen = json.loads(shop.manage("shell", "--no-imports", "-c", (
            "import json; from datetime import timedelta; from django.utils import timezone; "
            "from orders.models import Note; from receipts import fresh_keys; from receipts.models import ObservedRequest; "
            "print(json.dumps({'routes': sorted(set(ObservedRequest.objects.values_list('route', flat=True))), "
            "'notes': list(Note.objects.values_list('text', flat=True)), "
            "'fresh_keys': fresh_keys.counts(timezone.now() - timedelta(hours=1))}))")).strip().splitlines()[-1])
        assert seen["routes"] == [REORDER, "api/token/"]
        # The note ran twice and is the one fresh-key retry counted; the order's the one refused.
        assert seen["notes"] == ["Leave it at the door"] * 2
        assert seen["fresh_keys"] == {"orders.note": {"allowed": 1, "refused": 0},
                                      "orders.create": {"allowed": 0, "refused": 1}}

        page = browser.new_page(viewport={"width": 1440, "height": 900})
        static: dict[str, int] = {}
        page.on("response", lambda r: static.__setitem__(r.url, r.status) if "/static/" in r.url else None)
        page.goto(base + "/ops/")
        # The host's own login page, in the host's own base.html: not replaced by the dashboard's.
        assert page.url == base + "/accounts/login/?next=/ops/"
        assert page.locator("h1").inner_text() == "Sign in to The Shop"
        assert page.title() == "Sign in · The Shop"
        page.screenshot(path=str(SHOTS / "drf-host-login.png"))
        page.fill("input[name=username]", OPERATOR)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(base + "/ops/")
        page.wait_for_selector(".chart-plot.js-plotly-plot svg.main-svg", timeout=30_000)
        # The dashboard's own stylesheet applies (its accent colour, its sticky top bar), not the host's.
        assert page.title().endswith("· idemdash")
        assert page.eval_on_selector(".brand-mark", "e => getComputedStyle(e).color") == "rgb(37, 99, 235)"
        assert page.eval_on_selector(".topbar", "e => getComputedStyle(e).position") == "sticky"
        assert page.locator(".who-name").inner_text() == OPERATOR
        assert page.locator(".role").text_content() == "operator"
        page.screenshot(path=str(SHOTS / "drf-host-ops-overview.png"))

        page.goto(base + "/ops/receipts/")
        rows = page.locator("table tbody tr")
        listed = {(rows.nth(i).locator("td.key").inner_text(), rows.nth(i).locator(".clip").first.inner_text())
                  for i in range(rows.count())}
        user_ids = json.loads(shop.manage("shell", "--no-imports", "-c", (
            "import json; from django.contrib.auth import get_user_model; "
            "print(json.dumps({u.username: u.pk for u in get_user_model().objects.all()}))"
        )))
        carol_scope = f"user:{user_ids['carol']}"
        # The refused order-0002 has no receipt.
        assert listed == {("order-0001", f"user:{user_ids['dave']}"),
                          *((key, carol_scope) for key in ("order-0001", "order-0003", "note-0001", "note-0002"))}
        assert page.eval_on_selector(".topbar", "e => getComputedStyle(e).position") == "sticky"
        page.screenshot(path=str(SHOTS / "drf-host-ops-receipts.png"), full_page=True)

        # Every static file came from the host's pipeline: WhiteNoise, hashed names.
        assert static and all(status == 200 for status in static.values()), static
        assert any(re.search(r"/static/css/idemdash\.[0-9a-f]{12}\.css$", url) for url in static), static
        assert any(re.search(r"/static/vendor/plotly\.min\.[0-9a-f]{12}\.js$", url) for url in static), static
        page.close()


def service_env(shop: Shop, database: Database, tmp_path: Path, **extra: str) -> dict[str, str]:
    """idemdash's own settings on the shop's database, from docs/host-project.md's block,
    with the placeholders (the database's address, the project's folder) made real."""
    language, code = GUIDE["service_env"]
    assert language == "sh"
    exported = dict(re.findall(r"^export (\w+)=(\S+)", code, re.M))
    assert set(exported) == {"DATABASE_URL", "IDEMDASH_AUTH_USER_MODEL", "IDEMDASH_HOST_APPS", "PYTHONPATH"}
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONDONTWRITEBYTECODE": "1",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "IDEMDASH_VAR_DIR": str(tmp_path / "service-var"),
        **exported,
        "DATABASE_URL": database.url,
        "PYTHONPATH": str(shop.project),
        **extra,
    }


def service(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """idemdash's own manage.py, from the checkout, in the test's environment (idemdash[server])."""
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    if check:
        assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done


# Run in the service: log in on its login page with the shop's user and password, read the
# receipts page, then run the worker's own outbox entry point.
SERVICE_SESSION = """
import json, re
from django.contrib.auth import get_user_model
from django.test import Client
from receipts.outbox import tasks
from receipts.outbox.models import OutboxMessage

client = Client()
login = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD})
receipts = client.get("/receipts/")
print(json.dumps({
    "user_model": get_user_model()._meta.label,
    "login": [login.status_code, login.get("Location")],
    "receipts": [receipts.status_code, sorted(set(re.findall(r'title="(order-[0-9]+)"', receipts.content.decode())))],
    "drain": tasks.drain_due(),
    "messages": {m.key: [m.status, m.attempts] for m in OutboxMessage.objects.order_by("key")},
}))
""".replace("PASSWORD", repr(PASSWORD))


def session(env: dict[str, str]) -> dict:
    """SERVICE_SESSION's findings (its last line), with what else it printed under "printed"."""
    *printed, last = service(env, "shell", "--no-imports", "-c", SERVICE_SESSION).stdout.strip().splitlines()
    return {**json.loads(last), "printed": "\n".join(printed)}


@pytest.mark.parametrize("database", ["postgres"], indirect=True)
def test_the_dashboard_as_a_separate_service_on_a_drf_hosts_database(shop_venv, tmp_path, database):
    shop = Shop(shop_venv, tmp_path, database, dashboard=False, worker=True)
    shop.manage("migrate", "--noinput")
    shop.manage("collectstatic", "--noinput")
    shop.create_user(OPERATOR, is_staff=True)
    for base in shop.serve():
        with httpx.Client(base_url=base, timeout=30) as client:
            operator = jwt(client, OPERATOR)
            assert place_order(client, operator, "order-0001", "TEA-1").status_code == 201
            # Placed again under a new key: refused, and so neither a receipt nor a message (below).
            fresh_key_retry(place_order(client, operator, "order-0002", "TEA-1"), "order-0001")
    shop_tables = database.tables()
    assert "accounts_user" in shop_tables and "auth_user" not in shop_tables

    # Without the host's user model, migrate refuses before it writes a table.
    plain = {k: v for k, v in service_env(shop, database, tmp_path).items()
             if k not in ("IDEMDASH_AUTH_USER_MODEL", "IDEMDASH_HOST_APPS")}
    refused = service(plain, "migrate", "--noinput", check=False)
    assert refused.returncode != 0, (refused.stdout, refused.stderr)
    assert "IDEMDASH_AUTH_USER_MODEL" in refused.stderr and "nothing was migrated" in refused.stderr
    assert database.tables() == shop_tables

    # As the docs say: the block's variables, then migrate.
    env = service_env(shop, database, tmp_path)
    language, command = GUIDE["service_migrate"]
    assert language == "sh" and command.strip() == "python manage.py migrate"
    service(env, "migrate", "--noinput")
    service(env, "collectstatic", "--noinput")  # as every deployment of it (docs/operations.md, Production)
    assert {"idemdash_dashboard_alertrule", "django_q_schedule", "outbox_outboxmessage"} <= database.tables()
    assert "auth_user" not in database.tables()
    # The operators group exists now, in the shop's database: the docs' access block, in the shop.
    shop.block("dashboard_access")

    seen = session(env)
    assert seen["user_model"] == "accounts.User"
    assert seen["login"] == [302, "/"]
    assert seen["receipts"] == [200, ["order-0001"]]
    # OUTBOX_DRAIN is off: the service's worker claims none of the shop's messages.
    assert seen["drain"]["claimed"] == 0
    assert seen["messages"] == {"order-1-mail": ["pending", 0], "order-1-ship": ["pending", 0]}

    # Told to drain, it still never claims the shop's own action (not registered in it).
    seen = session({**env, "OUTBOX_DRAIN": "1"})
    # The shop's email went out through the service's mail backend (the console): why draining is off by default.
    assert "Subject: Order 1" in seen["printed"]
    assert seen["drain"]["claimed"] == 1 and seen["drain"]["sent"] == 1
    assert seen["messages"] == {"order-1-mail": ["sent", 1], "order-1-ship": ["pending", 0]}

    # The shop's own worker sends its own action.
    assert "claimed=1 sent=1" in shop.manage("drain_outbox")
    assert shop.shipments.read_text().split() == ["1", "order-1-ship"]

    # Both django-q2 clusters read the one schedule table: each runs its own schedules only.
    # The shop's nightly job, and its copies of receipts' and the outbox's; the service's copies
    # name its cluster (idemdash/core/schedules.py). Every schedule made due, then each cluster's
    # scheduler (what its qcluster runs every 30 s) in its own project and settings.
    shop.manage("shell", "--no-imports", "-c", (
        "from django_q.models import Schedule; "
        "Schedule.objects.create(name='shop.nightly', func='orders.tasks.nightly', schedule_type='I', minutes=1)"
    ))
    due = ("from datetime import timedelta; from django.utils import timezone; from django_q.models import Schedule; "
           "Schedule.objects.update(task=None, next_run=timezone.now() - timedelta(seconds=5))")
    picked = ("import json; from django_q.models import Schedule; from django_q.scheduler import scheduler; scheduler(); "
              "print(json.dumps(sorted(f'{s.name}@{s.cluster}' for s in Schedule.objects.exclude(task=None))))")
    shop.manage("shell", "--no-imports", "-c", due)
    by_shop = json.loads(shop.manage("shell", "--no-imports", "-c", picked).strip().splitlines()[-1])
    shop.manage("shell", "--no-imports", "-c", due)
    by_service = json.loads(service(env, "shell", "--no-imports", "-c", picked).stdout.strip().splitlines()[-1])
    shared = ["outbox.drain", "receipts.compact", "receipts.purge", "receipts.resume_bulk_runs", "receipts.rollup"]
    assert by_shop == sorted([f"{name}@None" for name in shared] + ["shop.nightly@None"])
    assert by_service == sorted(f"{name}@idemdash-service" for name in [*shared, "idemdash_dashboard.alerts", "webhooks.sweep"])
