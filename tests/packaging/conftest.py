"""The sdist and wheel, built once for every packaging test that installs them, and the
virtual environment of the wheel with its dashboard extra, made once for the tests that install
the same; a database of the host project's own."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import dj_database_url

import pytest

from tests.packaging.host import INSTALL, Database, new_venv, run, run_block
from tests.packaging.source import copy_source
from tests.qcluster import database_url

DRF_HOST = Path(__file__).parent / "drf_host"


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `name`, made by make(folder) once in a test run: by whichever pytest-xdist
    worker asks first (a session fixture is made once per worker), while the others wait for
    it under a lock and then use what it made. What is made there is only read afterwards."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / f"{name}.done").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker's attempt that failed
            folder.mkdir()
            make(folder)
            (shared / f"{name}.done").touch()
    return folder


def _build(root: Path) -> None:
    source = copy_source(root)
    run_block(INSTALL["build"], new_venv(root / "build-venv"), checkout=source, cwd=root)


@pytest.fixture(scope="session")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout, with dist/ built in it by docs/install.md's build block, run
    in a fresh virtual environment."""
    return once_per_run(tmp_path_factory, "wheel", _build) / "src"


@pytest.fixture(scope="session")
def wheel(checkout) -> Path:
    (built,) = (checkout / "dist").glob("idemdash-*.whl")
    return built


@pytest.fixture(scope="session")
def client_wheel(checkout) -> Path:
    """The wheel of the Python client's own distribution (clients/python), built beside."""
    (built,) = (checkout / "dist").glob("idemdash_client-*.whl")
    return built


@pytest.fixture(scope="session")
def dashboard_venv(checkout, tmp_path_factory) -> Path:
    """The wheel with its dashboard extra, installed by docs/install.md's block into a fresh
    environment: what test_wheel.py's host, test_drf_host.py's shop and test_plain_host.py's
    paydesk install. The shop's own requirements (DRF, SimpleJWT, gunicorn, WhiteNoise; psycopg
    on PostgreSQL) and the wheel's `ninja` and `asgi` extras (the paydesk's Ninja router and
    uvicorn) are there too: the host projects' packages, which test_wheel.py's host does not use."""
    def make(root: Path) -> None:
        venv = new_venv(root / "venv")
        run_block(INSTALL["wheel"], venv, checkout=checkout, cwd=root)
        (built,) = (checkout / "dist").glob("idemdash-*.whl")
        run(venv / "bin" / "pip", "install", f"{built}[ninja,asgi]", "-r", DRF_HOST / "requirements.txt", timeout=300)
        if database_url().startswith("postgres"):
            run(venv / "bin" / "pip", "install", "psycopg[binary]>=3.2,<4", timeout=300)

    return once_per_run(tmp_path_factory, "dashboard-venv", make) / "venv"


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, tmp_path) -> Iterator[Database]:
    """A database of the host project's own: a SQLite file, or a PostgreSQL database made
    for it on the server of DATABASE_URL."""
    if request.param == "sqlite":
        path = tmp_path / "shop.sqlite3"
        yield Database({"ENGINE": "django.db.backends.sqlite3", "NAME": str(path),
                        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20}}, f"sqlite:///{path}")
        return
    if not database_url().startswith("postgres"):
        if os.environ.get("IDEMDASH_REQUIRE_POSTGRES") == "1":
            pytest.fail("needs PostgreSQL: DATABASE_URL is not postgres://")
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")
    import psycopg

    name = f"shop_{os.environ.get('IDEMDASH_TEST_DB_SUFFIX', 'host')}"
    url = database_url(name)

    def recreate(create: bool) -> None:
        with psycopg.connect(database_url("postgres"), autocommit=True) as db:
            db.execute(f'drop database if exists "{name}" with (force)')
            if create:
                db.execute(f'create database "{name}"')

    recreate(True)
    try:
        yield Database(dj_database_url.parse(url), url)
    finally:
        recreate(False)
