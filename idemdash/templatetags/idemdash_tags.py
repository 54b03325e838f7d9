from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def percent(fraction: float | None) -> str:
    """0.125 -> '12.5%': the duplicate rate as people read it (the JSON keeps the fraction)."""
    if fraction is None:
        return "–"
    text = f"{fraction * 100:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"


@register.filter
def duration(seconds: int | None) -> str:
    """3725 -> '1 h 2 min': an age as people read it (the JSON keeps the seconds)."""
    if not seconds:
        return "–"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter
def since(moment: datetime | None, now: datetime | None = None) -> str:
    """How long ago `moment` was, as `duration` says it ("45 s", "3 min", "1 h 2 min")."""
    if moment is None:
        return "–"
    seconds = int(((now or timezone.now()) - moment).total_seconds())
    return duration(seconds) if seconds > 0 else "0 s"


# The operator's verb for each audit action (docs/architecture.md section 8); the stored
# action names stay as they are.
AUDIT_VERBS = {
    "receipt.release": "Release",
    "webhook_event.reprocess": "Reprocess",
    "webhook_event.release": "Release (stuck)",
    "outbox.retry_now": "Send now",
    "outbox.requeue_dead": "Send again",
    "outbox.release": "Release (stuck)",
    "webhook_endpoint.pause": "Pause endpoint",
    "webhook_endpoint.resume": "Resume endpoint",
}


@register.filter
def audit_verb(action: str) -> str:
    return AUDIT_VERBS.get(action, action)


@register.filter
def audit_status_after(entry) -> str:
    """A receipt release recorded before the release marker existed reads "failed" after;
    what it did was release the key."""
    if entry.action == "receipt.release" and entry.status_after == "failed":
        return "released"
    return entry.status_after
