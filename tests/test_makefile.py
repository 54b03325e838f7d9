"""Which Python `make demo` and `make test` take (the Makefile's first lines): the one the venv
was made with, while it runs and is supported; else the newest supported one that runs, from
python3.13, python3.12, python3.11, then python3; PYTHON= names another; with none, a message that says which versions it accepts. Run with a PATH of stand-in
interpreters: links to the Python running the tests (a supported one) under each name, and
failing scripts like a pyenv shim of a version pyenv has not selected."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
SHIM = '#!/bin/sh\necho "pyenv: $(basename "$0"): command not found" >&2\nexit 127\n'

pytestmark = [pytest.mark.slow, pytest.mark.skipif(MAKE is None, reason="needs make")]


def interpreters(folder: Path, working: list[str], failing: list[str] = ()) -> Path:
    folder.mkdir()
    for name in working:
        (folder / name).symlink_to(sys.executable)
    for name in failing:
        (folder / name).write_text(SHIM)
        (folder / name).chmod(0o755)
    return folder


def make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    # Nothing of an outer make (`make test` runs this: its MAKEFLAGS carry PYTHON=, VENV=, ...).
    inherited = {"PYTHON", "VENV", "EXTRAS", "CONSTRAINTS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    env = {k: v for k, v in os.environ.items() if k not in inherited} | {"PATH": str(folder)}
    return subprocess.run([MAKE, "--no-print-directory", *args, f"VENV={folder.parent / 'venv'}"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60)


def chosen(done: subprocess.CompletedProcess) -> str:
    """The interpreter `make -n install` would make the venv with."""
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if " -m venv --clear " in line]
    return line.split(" -m venv ")[0].split("|| ")[-1].strip()


def test_it_takes_the_newest_supported_python_that_runs(tmp_path):
    bin_ = interpreters(tmp_path / "bin", ["python3.13", "python3.12", "python3.11", "python3"])
    assert chosen(make(bin_, "-n", "install")) == str(bin_ / "python3.13")


def test_it_skips_an_interpreter_that_does_not_run(tmp_path):
    bin_ = interpreters(tmp_path / "bin", ["python3.12", "python3.11", "python3"], failing=["python3.13"])
    assert chosen(make(bin_, "-n", "install")) == str(bin_ / "python3.12")


def test_it_falls_back_to_python3_when_that_is_supported(tmp_path):
    bin_ = interpreters(tmp_path / "bin", ["python3"], failing=["python3.13", "python3.12", "python3.11"])
    assert chosen(make(bin_, "-n", "install")) == str(bin_ / "python3")


def test_python_names_another(tmp_path):
    bin_ = interpreters(tmp_path / "bin", ["python3.13", "python3.12"])
    assert chosen(make(bin_, "-n", "install", f"PYTHON={bin_ / 'python3.12'}")) == str(bin_ / "python3.12")


@pytest.mark.parametrize("goal", ["demo", "test"])
def test_without_a_supported_python_it_says_which_versions_it_accepts(tmp_path, goal):
    bin_ = interpreters(tmp_path / "bin", [], failing=["python3.13", "python3.12", "python3.11", "python3"])
    done = make(bin_, goal)
    assert done.returncode != 0
    assert done.stderr.splitlines()[:2] == [
        "idemdash needs Python 3.11, 3.12 or 3.13; none was found (tried python3.13 python3.12 python3.11"
        " python3 on PATH).",
        f"Install one, or name it: make {goal} PYTHON=/path/to/python3.x",
    ]
    assert not (tmp_path / "venv").exists()


def test_an_unsupported_python_named_is_refused(tmp_path):
    bin_ = interpreters(tmp_path / "bin", ["python3.13"], failing=["python3.10"])
    done = make(bin_, "install", f"PYTHON={bin_ / 'python3.10'}")
    assert done.returncode != 0
    assert f"idemdash needs Python 3.11, 3.12 or 3.13; PYTHON={bin_ / 'python3.10'} is not one of them." in done.stderr
    assert not (tmp_path / "venv").exists()


def test_another_python_or_other_extras_install_again_over_an_installed_venv(tmp_path):
    """The install's stamp names its extras and Python: a venv installed with the dev extra
    on python3.13 is up to date for the same, and installed again for EXTRAS=dev,bench or
    PYTHON=python3.12 (the stamp once ignored both and left the venv without the extra)."""
    bin_ = interpreters(tmp_path / "bin", ["python3.13", "python3.12"])
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-dev-python3.13").touch()
    assert "pip install" not in make(bin_, "-n", "install").stdout
    assert "pip install" in make(bin_, "-n", "install", "EXTRAS=dev,bench").stdout
    assert "pip install" in make(bin_, "-n", "install", f"PYTHON={bin_ / 'python3.12'}").stdout


def test_a_venv_of_a_supported_python_is_kept_when_no_python_is_named(tmp_path):
    """`make install PYTHON=/opt/python3.13` made the venv; a later `make test` on a PATH whose
    newest Python is another (pyenv's shims: only the global version runs) keeps it, instead
    of making it anew with that one."""
    bin_ = interpreters(tmp_path / "bin", ["python3.12", "python3.11"], failing=["python3.13"])
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    base = subprocess.run([venv / "bin" / "python", "-c", "import sys; print(sys._base_executable)"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (venv / f".installed-dev-{Path(base).name}").touch()
    kept = make(bin_, "-n", "install")
    assert "venv --clear" not in kept.stdout and "pip install" not in kept.stdout, kept.stdout  # up to date
    # Named, another Python still makes it anew.
    assert chosen(make(bin_, "-n", "install", f"PYTHON={bin_ / 'python3.12'}")) == str(bin_ / "python3.12")
