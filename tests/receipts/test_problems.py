from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_problem_type_used_by_the_receipts_app_is_in_the_readme_table():
    used: set[str] = set()
    for source in (ROOT / "receipts").rglob("*.py"):
        text = source.read_text()
        used |= set(re.findall(r'problem\(\s*\d{3},\s*"([a-z-]+)"', text))
        used |= set(re.findall(r'urn:idemdash:problem:([a-z-]+)', text))
    documented = set(re.findall(r"^\| `urn:idemdash:problem:([a-z-]+)` \|", (ROOT / "README.md").read_text(), re.M))
    assert {"idempotency-key-missing", "stale-token", "lease-lost"} <= used  # the scan finds them
    assert used <= documented, sorted(used - documented)
