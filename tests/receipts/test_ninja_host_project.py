"""idemdash dropped into an existing Django Ninja project, served with three workers by
gunicorn (a sync operation) and by uvicorn (the same operation written `async def`).

The test writes a throwaway host project (its own settings, urls, an `api.py` with a
NinjaAPI, an app with Order and AccessToken models) as Ninja's documentation writes one: an
`HttpBearer` whose `authenticate` looks the token up and returns its user (`request.auth`),
Schemas for input and output, `response={201: OrderOut}`. It migrates its own database
(beside the test database, on the same server or as a SQLite file); two users call it with
their tokens. The orders written are counted in that database. Every test that calls the
project runs against both servers (the `host` fixture's parameter).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from collections.abc import Iterator

import httpx
import pytest

from tests.receipts.host_project import GUNICORN, WSGI, HostDatabase, HostProject
from tests.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), pytest.mark.django_db]

SETTINGS = '''
import os

import dj_database_url

SECRET_KEY = "ninja-host-project-for-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "idemdash.core",
    "receipts",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
# HOST_URLS picks a urls module with a misplaced decorator, for the tests that it is refused.
ROOT_URLCONF = os.environ.get("HOST_URLS", "hostsite.urls")
DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"])}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 30}
'''

URLS = '''
from django.urls import path

from shop.api import api

urlpatterns = [path("api/", api.urls)]
'''


MODELS = '''
from django.conf import settings
from django.db import models


class AccessToken(models.Model):
    key = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)


class Order(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    amount = models.IntegerField()
'''

MIGRATION = '''
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = [migrations.swappable_dependency(settings.AUTH_USER_MODEL)]
    operations = [
        migrations.CreateModel(
            name="AccessToken",
            fields=[
                ("id", models.AutoField(primary_key=True, serialize=False)),
                ("key", models.CharField(max_length=64, unique=True)),
                ("user", models.ForeignKey(on_delete=models.CASCADE, to=settings.AUTH_USER_MODEL)),
            ],
        ),
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.AutoField(primary_key=True, serialize=False)),
                ("amount", models.IntegerField()),
                ("user", models.ForeignKey(on_delete=models.CASCADE, to=settings.AUTH_USER_MODEL)),
            ],
        ),
    ]
'''

API = '''
import asyncio
import time
from pathlib import Path

from ninja import NinjaAPI, Schema
from ninja.responses import Status
from ninja.security import HttpBearer

from receipts.ninja import idempotent
from shop.models import AccessToken, Order


class TokenAuth(HttpBearer):
    def authenticate(self, request, token):
        found = AccessToken.objects.select_related("user").filter(key=token).first()
        return found.user if found else None


class OrderIn(Schema):
    amount: int


class OrderOut(Schema):
    id: int
    amount: int
    user: str


api = NinjaAPI(auth=TokenAuth())


@api.post("/orders", response={201: OrderOut})
@idempotent("order.create")
def create_order(request, payload: OrderIn, hold: str = ""):
    for _ in range(600 if hold else 0):  # until the test creates released-<hold> in the project, at most a minute
        if Path(f"released-{hold}").exists():
            break
        time.sleep(0.1)
    order = Order.objects.create(user=request.auth, amount=payload.amount)
    return Status(201, {"id": order.pk, "amount": order.amount, "user": request.auth.username})


@api.post("/async-orders", response={201: OrderOut})
@idempotent("order.create")
async def create_order_async(request, payload: OrderIn, hold: str = ""):
    for _ in range(600 if hold else 0):
        if Path(f"released-{hold}").exists():
            break
        await asyncio.sleep(0.1)
    order = await Order.objects.acreate(user=request.auth, amount=payload.amount)
    return Status(201, {"id": order.pk, "amount": order.amount, "user": request.auth.username})
'''

# The two misplacements, each in a urls module of its own (HOST_URLS).
WRONG = {
    "plain decorator on the operation": '''
from django.urls import path
from ninja import NinjaAPI

from receipts.decorators import idempotent

api = NinjaAPI(urls_namespace="wrong")


@api.post("/orders")
@idempotent("order.create")
def create_order(request):
    return {}

urlpatterns = [path("api/", api.urls)]
''',
    "ninja decorator above the operation decorator": '''
from django.urls import path
from ninja import NinjaAPI

from receipts.ninja import idempotent

api = NinjaAPI(urls_namespace="wrong")


@idempotent("order.create")
@api.post("/orders")
def create_order(request):
    return {}

urlpatterns = [path("api/", api.urls)]
''',
}

WRONG["plain decorator on an async operation"] = WRONG["plain decorator on the operation"].replace(
    "def create_order", "async def create_order"
)

ASGI = '''
from django.core.asgi import get_asgi_application

application = get_asgi_application()
'''

USERS = '''
import json
from django.contrib.auth.models import User
from shop.models import AccessToken

print(json.dumps({name: AccessToken.objects.create(key=f"token-{name}-0123456789", user=User.objects.create_user(name)).key
                  for name in ("alice", "bob")}))
'''

FILES = {
    "hostsite/__init__.py": "",
    "hostsite/settings.py": SETTINGS,
    "hostsite/urls.py": URLS,
    "hostsite/wsgi.py": WSGI,
    "hostsite/wrong_plain.py": WRONG["plain decorator on the operation"],
    "hostsite/wrong_above.py": WRONG["ninja decorator above the operation decorator"],
    "hostsite/wrong_async.py": WRONG["plain decorator on an async operation"],
    "hostsite/asgi.py": ASGI,
    "shop/__init__.py": "",
    "shop/models.py": MODELS,
    "shop/migrations/__init__.py": "",
    "shop/migrations/0001_initial.py": MIGRATION,
    "shop/api.py": API,
}


@dataclass
class Host:
    project: HostProject
    base: str
    tokens: dict[str, str]
    orders: str  # the operation's path: the sync one under gunicorn, the async one under uvicorn

    @property
    def db(self) -> HostDatabase:
        return self.project.db

    def caller(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def order(self, client: httpx.Client, key: str, amount: int, query: str = "") -> httpx.Response:
        return client.post(self.orders + query, json={"amount": amount}, headers={"Idempotency-Key": key})


UVICORN = [sys.executable, "-m", "uvicorn", "hostsite.asgi:application", "--host", "127.0.0.1", "--port", "{port}",
           "--workers", "3", "--log-level", "warning", "--timeout-graceful-shutdown", "2"]
SERVERS = {"gunicorn": (GUNICORN, "/api/orders"), "uvicorn": (UVICORN, "/api/async-orders")}


@pytest.fixture(scope="module", params=SERVERS)
def host(request, tmp_path_factory, django_db_setup) -> Iterator[Host]:
    """The host project, migrated and served by gunicorn or uvicorn."""
    server, orders = SERVERS[request.param]
    project = HostProject(tmp_path_factory.mktemp("ninja-host"), FILES, "hostsite.settings")
    with project.migrated_and_served(USERS, "/api/openapi.json", server) as (base, tokens):
        yield Host(project, base, tokens, orders)


def counted(db: HostDatabase) -> list[tuple]:
    return db.rows(
        "SELECT u.username, o.amount, COUNT(*) FROM shop_order o JOIN auth_user u ON u.id = o.user_id "
        "GROUP BY u.username, o.amount ORDER BY u.username, o.amount"
    )


def test_each_user_gets_their_own_execution_and_a_byte_identical_replay(host):
    alice, bob = host.caller(host.tokens["alice"]), host.caller(host.tokens["bob"])
    first = {"alice": host.order(alice, "same", 100), "bob": host.order(bob, "same", 200)}
    for name, response in first.items():
        assert response.status_code == 201, response.text
        assert "Idempotent-Replayed" not in response.headers
        assert response.json()["user"] == name and set(response.json()) == {"id", "amount", "user"}
    for name, client in (("alice", alice), ("bob", bob)):
        again = host.order(client, "same", 100 if name == "alice" else 200)
        assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
        assert again.content == first[name].content
        assert again.headers["Content-Type"] == first[name].headers["Content-Type"] == "application/json; charset=utf-8"
    assert [row for row in counted(host.db) if row[1] in (100, 200)] == [("alice", 100, 1), ("bob", 200, 1)]
    user_ids = dict(host.db.rows("SELECT username, id FROM auth_user"))
    assert host.db.rows("SELECT scope FROM receipts_receipt WHERE key = 'same' ORDER BY scope") == sorted(
        (f"user:{user_ids[name]}",) for name in ("alice", "bob")
    )


def test_the_documented_problems_are_problem_json(host):
    alice = host.caller(host.tokens["alice"])
    assert host.order(alice, "problems", 5).status_code == 201
    reused = host.order(alice, "problems", 6)
    assert reused.status_code == 422 and reused.headers["Content-Type"] == "application/problem+json"
    assert reused.json()["type"] == "urn:idemdash:problem:idempotency-key-reused"
    missing = alice.post(host.orders, json={"amount": 5})
    assert missing.status_code == 400 and missing.json()["type"] == "urn:idemdash:problem:idempotency-key-missing"
    too_big = alice.post(host.orders, content=b"x" * (2_621_440 + 1), headers={"Idempotency-Key": "big"})
    assert too_big.status_code == 413 and too_big.json()["type"] == "urn:idemdash:problem:payload-too-large"

    # Alice's first attempt still runs in one worker: her retry is told 409 (on SQLite, whose
    # writers queue, it waits for the first attempt and gets its replay). The view runs until
    # the test lets it go (?hold=): once the retry has its answer, or at once on SQLite.
    answers: dict[str, httpx.Response] = {}

    def send(name: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.update({name: host.order(alice, "slow", 7, "?hold=slow")}))
        thread.start()
        return thread

    running = [send("first")]
    until(lambda: host.db.rows("SELECT 1 FROM receipts_receipt WHERE key = 'slow'"), "Alice's first claim")
    running.append(send("retry"))
    if host.db.postgres:
        until(lambda: "retry" in answers, "the answer to Alice's retry")
    (host.project.root / "released-slow").touch()
    for thread in running:
        thread.join(60)
    first, retry = {"response": answers["first"]}, answers["retry"]
    assert first["response"].status_code == 201
    if host.db.postgres:
        assert retry.status_code == 409 and retry.headers["Content-Type"] == "application/problem+json"
        assert retry.json()["type"] == "urn:idemdash:problem:request-in-progress"
    else:
        assert retry.headers["Idempotent-Replayed"] == "true" and retry.content == first["response"].content
    assert host.db.rows("SELECT COUNT(*) FROM shop_order WHERE amount IN (5, 6, 7)") == [(2,)]


def test_an_unauthenticated_call_is_ninjas_401_and_claims_nothing(host):
    for client in (httpx.Client(base_url=host.base, timeout=20), host.caller("not-a-token")):
        assert host.order(client, "nobody", 13).status_code == 401
    assert host.db.rows("SELECT COUNT(*) FROM receipts_receipt WHERE key = 'nobody'") == [(0,)]


def test_many_concurrent_callers_get_one_order_per_user_and_key(host):
    clients = [host.caller(host.tokens[name]) for name in ("alice", "bob") for _ in range(6)]
    answers = []
    racers = [threading.Thread(target=lambda c=c: answers.append(host.order(c, "race", 31))) for c in clients]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)
    assert len(answers) == 12
    # Each is the first attempt, its replay, or (on PostgreSQL) 409 while the first runs.
    assert {a.status_code for a in answers} <= {201, 409}
    assert sum("Idempotent-Replayed" not in a.headers and a.status_code == 201 for a in answers) == 2
    assert [row for row in counted(host.db) if row[1] == 31] == [("alice", 31, 1), ("bob", 31, 1)]


@pytest.fixture(scope="module")
def unserved(tmp_path_factory) -> HostProject:
    """The host project's files, neither migrated nor served: what `check` reads."""
    return HostProject(tmp_path_factory.mktemp("ninja-checked"), FILES, "hostsite.settings")


# Run once, not once per server: `check` starts neither.
@pytest.mark.parametrize("urls", ["hostsite.wrong_plain", "hostsite.wrong_above", "hostsite.wrong_async"])
def test_a_misplaced_decorator_stops_the_project_at_start_naming_the_placement(unserved, urls):
    checked = unserved.django("check", check=False, HOST_URLS=urls)
    assert checked.returncode != 0
    assert "ImproperlyConfigured" in checked.stderr
    assert "directly below @api.post(...)" in checked.stderr, checked.stderr[-2000:]
