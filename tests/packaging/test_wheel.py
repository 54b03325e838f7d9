"""The sdist and wheel built as docs/install.md says (`python -m build`, `twine check`, in a
fresh virtual environment), and what the wheel holds: the apps, the dashboard's templates and
static files, and none of the developer tooling (idemdash/devtools/: the demo, simulator,
seeder, bench and their fixtures), which pyproject.toml excludes. Then the wheel installed
with the dashboard extra into another fresh environment, and a host project that mounts the
dashboard as docs/host-project.md says, served by `runserver`: a logged-in operator gets a
dashboard page, and its CSS and JavaScript are served from the installed app."""

from __future__ import annotations

import re
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.packaging.host import GUIDE, REPO, Host, host_env, make_host, run_block, stop

pytestmark = [pytest.mark.slow, pytest.mark.packaging, pytest.mark.timeout(420)]

# The dashboard's files, kept at the top of the repository; in the wheel, inside its app.
DASHBOARD_FILES = {
    f"idemdash/dashboard/{folder}/{path.relative_to(REPO / folder)}": path
    for folder in ("templates", "static")
    for path in sorted((REPO / folder).rglob("*"))
    if path.is_file()
}


@pytest.fixture(scope="module")
def wheel_files(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_build_makes_an_sdist_and_a_wheel_that_twine_accepts(checkout):
    # The build block ends with `twine check --strict`: the fixture failed if it did not pass.
    assert sorted(p.name for p in (checkout / "dist").iterdir()) == [
        "idemdash-0.1.0-py3-none-any.whl", "idemdash-0.1.0.tar.gz",
        "idemdash_client-0.1.0-py3-none-any.whl", "idemdash_client-0.1.0.tar.gz",
    ]
    with tarfile.open(checkout / "dist" / "idemdash-0.1.0.tar.gz") as sdist:
        names = set(sdist.getnames())
    assert {f"idemdash-0.1.0/{name}" for name in DASHBOARD_FILES} <= names


def test_the_wheel_says_which_versions_it_supports(wheel):
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("idemdash-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Python: <3.14,>=3.11" in metadata
    assert "Requires-Dist: Django<6.2,>=5.2" in metadata
    # The client is its own distribution, required at its version, not copied in.
    assert "Requires-Dist: idemdash-client==0.1.0" in metadata
    classifiers = set(re.findall(r"^Classifier: (.*)$", metadata, re.M))
    assert {f"Programming Language :: Python :: 3.{minor}" for minor in (11, 12, 13)} <= classifiers
    assert {f"Framework :: Django :: {version}" for version in ("5.2", "6.0", "6.1")} <= classifiers


def test_the_wheel_holds_the_apps(wheel_files):
    assert {
        "idemdash/settings.py",
        "idemdash/core/schedules.py",
        "idemdash/dashboard/apps.py",
        "idemdash/dashboard/migrations/0001_initial.py",
        "idemdash/dashboard/templatetags/idemdash_tags.py",
        "idemdash/dashboard/views/receipts.py",
        "idemdash/worker/apps.py",
        "idemdash/worker/migrations/0001_cluster_heartbeat.py",
        "receipts/store.py",
        "receipts/openapi.json",
        "receipts/management/commands/install_schedules.py",
        "webhooks/migrations/0001_initial.py",
    } <= set(wheel_files)


def test_the_wheel_holds_every_template_and_static_file_of_the_dashboard_in_its_app(wheel):
    assert "idemdash/dashboard/templates/dashboard/overview.html" in DASHBOARD_FILES
    assert "idemdash/dashboard/static/css/idemdash.css" in DASHBOARD_FILES
    with zipfile.ZipFile(wheel) as archive:
        held = set(archive.namelist())
        assert set(DASHBOARD_FILES) <= held
        assert all(archive.read(name) == path.read_bytes() for name, path in DASHBOARD_FILES.items())
    # Nowhere else: not at the top of site-packages, where they would clash with other projects'.
    assert not [name for name in held if name.startswith(("templates/", "static/"))]


def test_the_wheel_holds_no_copy_of_the_client(wheel_files):
    assert [name for name in wheel_files if name.startswith(("idemdash_client/", "clients/"))] == []
    assert "receipts/client.py" not in wheel_files and "receipts/context.py" not in wheel_files


def test_the_wheel_holds_no_developer_tooling(wheel_files):
    tooling = [
        name for name in wheel_files
        if name.startswith("idemdash/devtools/")
        or any(word in name for word in ("bench", "simulat", "seed", "demo_env", "demo_handlers", "fixtures", "agent_workflow"))
    ]
    assert tooling == []


@pytest.fixture
def dashboard_host(dashboard_venv, tmp_path) -> Iterator[Host]:
    """An environment with the wheel and its dashboard extra, as docs/install.md says
    (tests/packaging/conftest.py), and a host project on SQLite that mounts the dashboard as
    docs/host-project.md says."""
    venv = dashboard_venv
    database = f'DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "{tmp_path / "host.sqlite3"}"}}}}'
    host = Host(venv, make_host(tmp_path, database, dashboard=True), host_env(tmp_path))
    yield host


def test_a_host_installed_from_the_wheel_serves_the_dashboard_with_its_css(dashboard_host, tmp_path):
    host = dashboard_host
    # Nothing of the checkout is on the host's path: the apps come from the wheel.
    where = host.manage("shell", "--no-imports", "-c", "import idemdash.dashboard; print(idemdash.dashboard.__file__)")
    assert "/site-packages/idemdash/dashboard/" in where
    host.migrate()
    host.manage("shell", "--no-imports", "-c", (
        "from django.contrib.auth import get_user_model; "
        "get_user_model().objects.create_superuser('operator', password='wheel-host-password')"
    ))
    run_block(GUIDE["dashboard_static"], host.venv, checkout=tmp_path, cwd=host.project, env=host.env)
    collected = tmp_path / "collected"
    assert (collected / "css" / "idemdash.css").read_bytes() == (REPO / "static" / "css" / "idemdash.css").read_bytes()
    assert (collected / "vendor" / "plotly.min.js").stat().st_size > 1_000_000

    # --insecure: runserver serves /static/ through the finders, as DEBUG would.
    server, client = host.serve("--insecure")
    try:
        login = client.get("/accounts/login/")
        assert login.status_code == 200 and 'name="password"' in login.text  # the dashboard's login page
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        done = client.post("/accounts/login/?next=/ops/", data={
            "username": "operator", "password": "wheel-host-password", "csrfmiddlewaretoken": token,
        })
        assert done.status_code == 302 and done.headers["location"] == "/ops/"
        page = client.get("/ops/receipts/")
        assert page.status_code == 200 and "· idemdash</title>" in page.text
        stylesheets = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page.text)
        scripts = re.findall(r'<script src="([^"]+)"', page.text)
        assert "/static/css/idemdash.css" in stylesheets and "/static/js/idemdash.js" in scripts
        css = client.get("/static/css/idemdash.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert css.content == (REPO / "static" / "css" / "idemdash.css").read_bytes()
        assert client.get("/static/js/idemdash.js").status_code == 200
        overview = client.get("/ops/")
        assert overview.status_code == 200
        assert '<script src="/static/vendor/plotly.min.js"' in overview.text  # the PlotlyFinder's file
        assert client.get("/static/vendor/plotly.min.js").status_code == 200
    finally:
        stop(server, client)

