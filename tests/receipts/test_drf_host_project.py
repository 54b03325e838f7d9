"""idemdash dropped into an existing DRF project, served by gunicorn with three workers.

The test writes a throwaway host project (its own settings, urls, an app with an Order
model) that installs `receipts`, `rest_framework` and `rest_framework.authtoken` and puts
the decorators where "Each kind of view" in docs/http-contract.md says. It migrates its own
database (beside the test database, on the same server or as a SQLite file), and users call it with
DRF TokenAuthentication and SessionAuthentication (a real login, a real CSRF token). The
orders written are counted in that database.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.receipts.host_project import WSGI, HostDatabase, HostProject
from tests.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), pytest.mark.django_db]

SETTINGS = '''
import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "host-project-for-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "rest_framework",
    "rest_framework.authtoken",
    "idemdash.core",
    "receipts",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "hostsite.urls"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [BASE_DIR / "templates"]}]
DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"])}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 30}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}
'''

URLS = '''
from django.contrib.auth.views import LoginView
from django.urls import path
from rest_framework.routers import SimpleRouter

from shop import views

router = SimpleRouter()
router.register("orders", views.OrderViewSet, basename="order")

urlpatterns = [
    path("login/", LoginView.as_view(template_name="login.html")),
    path("function/", views.create_order),
    path("apiview/", views.OrderView.as_view()),
    *router.urls,
]
'''


MODELS = '''
from django.conf import settings
from django.db import models


class Order(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    amount = models.IntegerField()
    via = models.CharField(max_length=20)
'''

MIGRATION = '''
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = [migrations.swappable_dependency(settings.AUTH_USER_MODEL)]
    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.AutoField(primary_key=True, serialize=False)),
                ("amount", models.IntegerField()),
                ("via", models.CharField(max_length=20)),
                ("user", models.ForeignKey(on_delete=models.CASCADE, to=settings.AUTH_USER_MODEL)),
            ],
        ),
    ]
'''

VIEWS = '''
import time
from pathlib import Path

from rest_framework import viewsets
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.views import APIView

from receipts import drf
from receipts.decorators import idempotent
from shop.models import Order


def place(request, via):
    if "hold" in request.query_params:  # until the test creates released-<hold> in the project, at most a minute
        for _ in range(600):
            if Path(f"released-{request.query_params['hold']}").exists():
                break
            time.sleep(0.1)
    order = Order.objects.create(user=request.user, amount=request.data["amount"], via=via)
    return Response({"order": order.pk, "user": request.user.username, "amount": order.amount}, status=201)


@api_view(["POST"])
@idempotent("order.create")
def create_order(request):
    return place(request, "function")


class OrderView(APIView):
    @drf.idempotent("order.create")
    def post(self, request):
        return place(request, "apiview")


class OrderViewSet(viewsets.ViewSet):
    @drf.idempotent("order.create")
    def create(self, request):
        return place(request, "viewset")
'''

LOGIN = "<form method='post'>{% csrf_token %}{{ form }}</form>\n"

USERS = '''
import json
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

tokens = {name: Token.objects.create(user=User.objects.create_user(name)).key for name in ("alice", "bob")}
User.objects.create_user("carol", password="carol-password-1")
print(json.dumps(tokens))
'''

ENDPOINTS = {"function": "/function/", "apiview": "/apiview/", "viewset": "/orders/"}


FILES = {
    "hostsite/__init__.py": "",
    "hostsite/settings.py": SETTINGS,
    "hostsite/urls.py": URLS,
    "hostsite/wsgi.py": WSGI,
    "shop/__init__.py": "",
    "shop/models.py": MODELS,
    "shop/migrations/__init__.py": "",
    "shop/migrations/0001_initial.py": MIGRATION,
    "shop/views.py": VIEWS,
    "templates/login.html": LOGIN,
}


@pytest.fixture(scope="module")
def host(tmp_path_factory, django_db_setup) -> Iterator[tuple[str, dict[str, str], HostDatabase, Path]]:
    """The host project, migrated and served by gunicorn: (base URL, tokens, database, its folder)."""
    project = HostProject(tmp_path_factory.mktemp("drf-host"), FILES, "hostsite.settings")
    with project.migrated_and_served(USERS, "/login/") as (base, tokens):
        yield base, tokens, project.db, project.root


def token_client(base: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=20)


def session_client(base: str, username: str, password: str) -> httpx.Client:
    """Logged in through Django's LoginView; unsafe requests carry the CSRF token DRF's
    SessionAuthentication checks."""
    client = httpx.Client(base_url=base, timeout=20)
    client.get("/login/")
    answer = client.post(
        "/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": client.cookies["csrftoken"]}
    )
    assert answer.status_code == 302, answer.text
    client.headers["X-CSRFToken"] = client.cookies["csrftoken"]  # rotated at login
    return client


def order(client: httpx.Client, path: str, key: str, amount: int) -> httpx.Response:
    return client.post(path, json={"amount": amount}, headers={"Idempotency-Key": key})


def test_users_of_a_drf_project_each_get_their_own_keys(host):
    base, tokens, db, root = host
    users = {
        "alice": token_client(base, tokens["alice"]),
        "bob": token_client(base, tokens["bob"]),
        "carol": session_client(base, "carol", "carol-password-1"),
    }
    amounts = {"alice": 100, "bob": 200, "carol": 300}

    for via, path in ENDPOINTS.items():
        # The same key from three users, with bodies that would be a 422 in one scope.
        first = {name: order(client, path, f"same-{via}", amounts[name]) for name, client in users.items()}
        for name, response in first.items():
            assert response.status_code == 201, (via, name, response.text)
            assert "Idempotent-Replayed" not in response.headers
            assert response.json()["user"] == name and response.json()["amount"] == amounts[name]
        for name, client in users.items():
            again = order(client, path, f"same-{via}", amounts[name])
            assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
            assert again.content == first[name].content
            assert again.headers["Content-Type"] == first[name].headers["Content-Type"] == "application/json"

    # Alice's first attempt still runs in one worker: her own retry is told 409 (on SQLite,
    # whose writers queue, it waits for the first attempt and gets its replay), while Bob's
    # request under the same key runs in another worker as his own first attempt.
    # The views run until the test lets them go (?hold=), once Alice's retry has its answer
    # on PostgreSQL; at once on SQLite, where that answer waits for the first attempt.
    slow = "/apiview/?hold=slow"
    answers: dict[str, httpx.Response] = {}

    def send(name: str, user: str, amount: int) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.update({name: order(users[user], slow, "slow", amount)}))
        thread.start()
        return thread

    running = [send("first", "alice", 1)]
    until(lambda: db.rows("SELECT 1 FROM receipts_receipt WHERE key = 'slow'"), "Alice's first claim")
    running += [send("retry", "alice", 1), send("bob", "bob", 2)]
    if db.postgres:
        until(lambda: "retry" in answers, "the answer to Alice's retry")
    (root / "released-slow").touch()
    for thread in running:
        thread.join(60)
    alices, retry, bobs = {"first": answers["first"]}, answers["retry"], answers["bob"]
    assert alices["first"].status_code == 201 and alices["first"].json()["user"] == "alice"
    if db.postgres:
        assert retry.status_code == 409 and retry.headers["Content-Type"] == "application/problem+json"
    else:
        assert retry.headers["Idempotent-Replayed"] == "true" and retry.content == alices["first"].content
    assert bobs.status_code == 201 and "Idempotent-Replayed" not in bobs.headers and bobs.json()["user"] == "bob"

    # One user racing one key across the three workers: one order.
    racers = [threading.Thread(target=order, args=(users["carol"], "/orders/", "race", 7)) for _ in range(6)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(30)

    counted = db.rows(
        "SELECT u.username, o.via, COUNT(*) FROM shop_order o JOIN auth_user u ON u.id = o.user_id "
        "GROUP BY u.username, o.via ORDER BY u.username, o.via"
    )
    assert counted == [
        ("alice", "apiview", 2), ("alice", "function", 1), ("alice", "viewset", 1),
        ("bob", "apiview", 2), ("bob", "function", 1), ("bob", "viewset", 1),
        ("carol", "apiview", 1), ("carol", "function", 1), ("carol", "viewset", 2),
    ]
    scopes = db.rows("SELECT DISTINCT scope FROM receipts_receipt ORDER BY scope")
    user_ids = dict(db.rows("SELECT username, id FROM auth_user"))
    assert scopes == sorted((f"user:{user_ids[name]}",) for name in users)


def test_an_unauthenticated_or_csrf_less_call_is_refused_and_claims_nothing(host):
    base, tokens, db, _ = host
    anonymous = httpx.Client(base_url=base, timeout=20)
    assert order(anonymous, "/apiview/", "k", 13).status_code == 401
    assert order(token_client(base, "not-a-token"), "/function/", "k", 13).status_code == 401
    carol = session_client(base, "carol", "carol-password-1")
    del carol.headers["X-CSRFToken"]
    refused = order(carol, "/orders/", "refused", 13)
    assert refused.status_code == 403 and "CSRF" in refused.text
    assert db.rows("SELECT COUNT(*) FROM receipts_receipt WHERE key IN ('k', 'refused')") == [(0,)]
    assert db.rows("SELECT COUNT(*) FROM shop_order WHERE amount = 13") == [(0,)]
