"""A host project that receives webhooks as docs/host-project.md says ("Receiving webhooks":
its settings, URL and worker blocks as written), with `idemdash[webhooks]` in a fresh virtual
environment (so without the developer tooling, which the wheel leaves out), and its own
handlers for the event types the demo handles: Stripe `checkout.session.completed` and
`payment_intent.succeeded`, Shopify `orders/create`.

It starts cleanly (no "already has a handler"), its handlers are the only ones, a real
`runserver` receives signed deliveries, the documented worker processes them with the host's
handlers (a handler failing once is retried, its retry enqueued by the worker's tick), the
worker stops on a SIGTERM to its process group, and the host's database has no table of the
demo's (so no demo row can be written).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from idemdash.devtools.simulator import FIXTURES, stripe_event
from tests.packaging.source import copy_source
from tests.qcluster import free_port, signal_group
from tests.waits import until
from tests.packaging.host import GUIDE
from tests.webhooks.conftest import shopify_headers, stripe_headers

pytestmark = [pytest.mark.slow, pytest.mark.packaging, pytest.mark.timeout(300)]

STRIPE_SECRET = "whsec_host_project_0123456789abcdef"
SHOPIFY_SECRET = "shpss_host_project_0123456789abcdef"
OBJECTS = json.loads((FIXTURES / "stripe_objects.json").read_text())

# The host's own settings; the webhooks' are the guide's block (docs/host-project.md),
# appended as written. A one-second backoff, so that a retry comes within the test.
SETTINGS = """\
SECRET_KEY = "host-project-webhooks-test-key"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
ROOT_URLCONF = "host.urls"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "shop"]
MIDDLEWARE = []
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "{database}",
                          "OPTIONS": {{"timeout": 20, "transaction_mode": "IMMEDIATE"}}}}}}
WEBHOOKS_BACKOFF_BASE = 1
"""


# The host's own handlers, for exactly the types the demo handles: each writes a line to a
# file (the worker's process writes it, the test reads it).
HANDLERS = """\
import os

from webhooks.handlers import webhook_handler


def _record(event, what):
    with open(os.environ["HOST_HANDLED"], "a") as log:
        log.write(f"{event.provider} {event.event_type} {what}\\n")


@webhook_handler("stripe", "checkout.session.completed")
def checkout_completed(event):
    _record(event, event.payload["data"]["object"]["id"])


@webhook_handler("stripe", "payment_intent.succeeded")
def payment_succeeded(event):
    _record(event, event.payload["data"]["object"]["id"])


@webhook_handler("shopify", "orders/create")
def order_created(event):
    # Fails on its first attempt: the worker's tick retries it once its backoff ends.
    if event.attempts == 1:
        raise RuntimeError("the order service timed out")
    _record(event, event.payload["id"])
"""


def run(*args: str | Path, cwd: Path | None = None, env: dict | None = None, timeout: float = 180) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """`pip install idemdash[webhooks]` (from a copy of this checkout, beside the client's
    distribution it depends on) in a fresh environment."""
    root = tmp_path_factory.mktemp("webhooks-host")
    source = copy_source(root)
    env_dir = root / "venv"
    run(sys.executable, "-m", "venv", env_dir)
    run(env_dir / "bin" / "pip", "install", "--quiet", source / "clients" / "python", f"{source}[webhooks]", timeout=240)
    return env_dir


@pytest.fixture
def host(venv, tmp_path) -> Iterator[tuple[Path, dict[str, str]]]:
    project = tmp_path / "hostproject"
    for package in ("host", "shop"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text("")
    (project / "manage.py").write_text(textwrap.dedent("""\
        import os
        import sys

        from django.core.management import execute_from_command_line

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "host.settings")
        execute_from_command_line(sys.argv)
        """))
    assert (GUIDE["webhooks_settings"][0], GUIDE["webhooks_urls"][0]) == ("python", "python")
    (project / "host" / "settings.py").write_text(
        SETTINGS.format(database=tmp_path / "host.sqlite3") + GUIDE["webhooks_settings"][1]
    )
    (project / "host" / "urls.py").write_text("urlpatterns = []\n" + GUIDE["webhooks_urls"][1])
    (project / "shop" / "webhook_handlers.py").write_text(HANDLERS)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1",
           "HOST_HANDLED": str(tmp_path / "handled.log"),
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "SHOPIFY_WEBHOOK_SECRET": SHOPIFY_SECRET}
    yield project, env


def manage(venv: Path, project: Path, env: dict[str, str], *args: str) -> str:
    return run(venv / "bin" / "python", "manage.py", *args, cwd=project, env=env)


def start(venv: Path, project: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(venv / "bin" / "python"), "manage.py", *args], cwd=project, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            signal_group(process, signal.SIGKILL)
            process.wait()


def deliveries() -> list[tuple[str, bytes, dict[str, str]]]:
    """(slug, body, headers): one payment announced by its two Stripe events, one Shopify order."""
    found = []
    for obj, event_type in ((OBJECTS["checkout.session"], "checkout.session.completed"),
                            (OBJECTS["payment_intent"], "payment_intent.succeeded")):
        body = json.dumps(stripe_event(obj, event_type)).encode()
        found.append(("stripe", body, stripe_headers(body, STRIPE_SECRET)))
    body = json.dumps({"id": 820982911946154508, "name": "#1001", "total_price": "10.00", "currency": "EUR"}).encode()
    found.append(("shopify", body, shopify_headers(body, SHOPIFY_SECRET, shop="host-shop.myshopify.com")))
    return found


def settlement(venv, project, env) -> list[str]:
    """The events' statuses, their (provider, attempts), and any table the demo's handlers would have made."""
    return manage(venv, project, env, "shell", "--no-imports", "-c", (
        "from django.db import connection; from webhooks.models import WebhookEvent; "
        "print(sorted(WebhookEvent.objects.values_list('status', flat=True))); "
        "print(sorted(WebhookEvent.objects.values_list('provider', 'attempts'))); "
        "print(sorted(t for t in connection.introspection.table_names() "
        "if any(w in t for w in ('fulfil', 'shopifyorder', 'demo'))))"
    )).split("\n")[:3]


def test_a_host_with_its_own_handlers_for_the_demos_types_starts_and_runs_only_its_own(venv, host):
    project, env = host
    # Not in the installed package at all: the wheel leaves the developer tooling out.
    spec = manage(venv, project, env, "shell", "--no-imports", "-c",
                  "import importlib.util; print(importlib.util.find_spec('idemdash.devtools'))")
    assert spec.strip() == "None"

    # Start-up registers every installed app's handlers: the host's are the only ones.
    assert "no issues" in manage(venv, project, env, "check")
    manage(venv, project, env, "migrate", "--noinput")
    registered = manage(venv, project, env, "shell", "--no-imports", "-c", (
        "from webhooks.handlers import registered; "
        "print(sorted(f'{p} {t} {h.__module__}' for (p, t), h in registered().items()))"
    ))
    assert registered.strip() == str(sorted([
        "shopify orders/create shop.webhook_handlers",
        "stripe checkout.session.completed shop.webhook_handlers",
        "stripe payment_intent.succeeded shop.webhook_handlers",
    ]))

    port = free_port()
    server = start(venv, project, env, "runserver", "--noreload", f"127.0.0.1:{port}")
    worker = None
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            def answers() -> bool:
                assert server.poll() is None, server.stderr.read().decode()
                try:
                    return client.get("/webhooks/stripe/").status_code > 0
                except httpx.TransportError:
                    return False

            until(answers, "the host's server to start", within=60, every=0.2)
            for slug, body, headers in deliveries():
                response = client.post(f"/webhooks/{slug}/", content=body,
                                       headers={"Content-Type": "application/json", **headers})
                assert response.status_code == 200, response.text

        language, command = GUIDE["webhooks_worker"]
        assert language == "sh" and command.split()[:2] == ["python", "manage.py"]
        worker_log = project / "worker.log"
        with worker_log.open("wb") as log:  # a file, not a pipe that nobody reads while it runs
            worker = subprocess.Popen([str(venv / "bin" / "python"), *command.split()[1:]], cwd=project, env=env,
                                      stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        handled = Path(env["HOST_HANDLED"])
        def running() -> None:
            assert worker.poll() is None, worker_log.read_text()[-3000:]

        def handled_three() -> bool:
            running()
            return len(handled.read_text().splitlines() if handled.exists() else []) >= 3

        until(handled_three, "the host's worker to process the events", within=60, every=0.2)

        # A handler writes its line inside the transaction that then marks its event completed,
        # so the third line can precede the third commit: wait for the rows, not the file.
        def settled_all() -> list[str] | None:
            running()
            found = settlement(venv, project, env)
            return found if found[0] == "['completed', 'completed', 'completed']" else None

        settled = until(settled_all, "the host's events to settle", within=60, every=0.2)
        # idemdash's worker, ticking every 5 s: its sweep enqueues a due retry within seconds, not
        # at the every-minute schedule's next run.
        assert "Processed 'idemdash.worker.liveness.tick'" in worker_log.read_text()
        # SIGTERM to the whole group (systemd's default KillMode, `kill -- -PGID`): it stops.
        signal_group(worker, signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, worker_log.read_text()[-3000:]
    finally:
        stop(server)
        if worker is not None:
            stop(worker)

    assert sorted(handled.read_text().splitlines()) == [
        "shopify orders/create 820982911946154508",
        f"stripe checkout.session.completed {OBJECTS['checkout.session']['id']}",
        f"stripe payment_intent.succeeded {OBJECTS['payment_intent']['id']}",
    ]
    assert settled == ["['completed', 'completed', 'completed']",
                       "[('shopify', 2), ('stripe', 1), ('stripe', 1)]", "[]"]
