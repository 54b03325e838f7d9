from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def copy_source(root: Path) -> Path:
    """A copy of what a build reads (pyproject.toml, the README, the three packages, and the
    client's distribution in clients/python) under `root`, so that building writes nothing
    into the worktree."""
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("idemdash", "receipts", "webhooks"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    client = REPO / "clients" / "python"
    (source / "clients").mkdir()
    shutil.copytree(client, source / "clients" / "python",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist"))
    return source
