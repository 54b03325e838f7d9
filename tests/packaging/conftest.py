"""The sdist and wheel, built once for every packaging test that installs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.packaging.host import INSTALL, new_venv, run_block
from tests.packaging.source import copy_source


@pytest.fixture(scope="session")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout, with dist/ built in it by docs/install.md's build block, run
    in a fresh virtual environment."""
    root = tmp_path_factory.mktemp("wheel")
    source = copy_source(root)
    run_block(INSTALL["build"], new_venv(root / "build-venv"), checkout=source, cwd=root)
    return source


@pytest.fixture(scope="session")
def wheel(checkout) -> Path:
    (built,) = (checkout / "dist").glob("idemdash-*.whl")
    return built
