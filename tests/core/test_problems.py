from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# Every module that answers clients: one vocabulary of problem types, one table (the Problem
# types of docs/http-contract.md).
MODULES = sorted(
    path.relative_to(ROOT).as_posix()
    for app in ("receipts", "webhooks", "idemdash")
    for path in (ROOT / app).rglob("*.py")
    if "migrations" not in path.parts
)


def test_every_problem_type_any_module_answers_with_is_in_the_documented_table():
    used: set[str] = set()
    for source in (ROOT / name for name in MODULES):
        text = source.read_text()
        used |= set(re.findall(r'problem\(\s*\d{3},\s*"([a-z-]+)"', text))
        used |= set(re.findall(r'urn:idemdash:problem:([a-z-]+)', text))
    page = (ROOT / "docs" / "http-contract.md").read_text()
    documented = set(re.findall(r"^\| `urn:idemdash:problem:([a-z-]+)` \|", page, re.M))
    assert {"idempotency-key-missing", "stale-token", "lease-lost"} <= used  # the scan finds them
    assert used <= documented, sorted(used - documented)
