"""django-q2 entry points, referred to by dotted path. The logic is in webhooks.processing."""

from __future__ import annotations

from webhooks import processing


def process_event(event_id: int) -> str:
    return processing.process_event(event_id)


def process_event_by_key(endpoint_id: int, dedupe_key: str) -> str:
    return processing.process_event_by_key(endpoint_id, dedupe_key)


def sweep() -> dict[str, int]:
    return processing.sweep().as_dict()
