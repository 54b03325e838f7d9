"""django-q2 entry points, referred to by dotted path from schedules.py."""

from dataclasses import asdict

from receipts import retention


def purge() -> list[dict]:
    return [asdict(result) for result in retention.purge()]
