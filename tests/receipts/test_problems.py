from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# The HTTP contract and the JSON API; other modules document their problems in their own
# README sections.
MODULES = ("receipts/decorators.py", "receipts/api.py", "receipts/auth.py")


def test_every_problem_type_of_the_http_contract_and_the_api_is_in_the_readme_table():
    used: set[str] = set()
    for source in (ROOT / name for name in MODULES):
        text = source.read_text()
        used |= set(re.findall(r'problem\(\s*\d{3},\s*"([a-z-]+)"', text))
        used |= set(re.findall(r'urn:idemdash:problem:([a-z-]+)', text))
    documented = set(re.findall(r"^\| `urn:idemdash:problem:([a-z-]+)` \|", (ROOT / "README.md").read_text(), re.M))
    assert {"idempotency-key-missing", "stale-token", "lease-lost"} <= used  # the scan finds them
    assert used <= documented, sorted(used - documented)
