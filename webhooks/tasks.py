"""django-q2 entry points, referred to by dotted path. The logic is in webhooks.processing."""

from __future__ import annotations

from webhooks import processing


def process_event(event_id: int, traceparent: str | None = None) -> str:
    return processing.process_event(event_id, traceparent)


def process_event_by_key(endpoint_id: int, dedupe_key: str, traceparent: str | None = None) -> str:
    return processing.process_event_by_key(endpoint_id, dedupe_key, traceparent)


def sweep() -> dict[str, int]:
    return processing.sweep().as_dict()
