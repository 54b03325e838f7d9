"""The audit log: who did what to which object. Every operator action and manual repair of
every app is recorded here, by the domain function that performs it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

# The bulk run (idemdash/core/bulk_runs.py:BulkRun) whose items are being acted on: every entry
# recorded meanwhile, by whichever domain function, belongs to it. A context variable rather
# than a parameter of every domain function, which would each have to pass it on.
_current_run: ContextVar[Any] = ContextVar("audit_current_run", default=None)


class AuditEntry(models.Model):
    """Who did what to which object: every operator action and every manual repair."""

    created_at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=255)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=255)
    # What an operator knows the object by (a key, an event id, a rule's name), stored when the
    # entry is written, so that it still names the object once that is purged or deleted.
    object_name = models.CharField(max_length=255, blank=True)
    status_before = models.CharField(max_length=32, blank=True)
    status_after = models.CharField(max_length=32, blank=True)
    detail = models.TextField(blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # The bulk run this entry is an item of; the run's own entry has none (it names the run).
    run = models.ForeignKey(
        "idemdash_core.BulkRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries"
    )

    class Meta:
        verbose_name_plural = "audit entries"
        indexes = [
            models.Index(fields=["object_type", "object_id"], name="audit_object"),
            models.Index(fields=["object_name"], name="audit_object_name"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.object_type}:{self.object_id}"


# The fields that name an object as an operator knows it, first present and non-empty wins:
# a receipt's or message's key, a webhook event's provider id (else its dedupe key), an alert
# rule's or demo switch's name, an endpoint's slug.
NAME_FIELDS = ("key", "provider_event_id", "dedupe_key", "name", "slug")


REASON_LIMIT = 500


def cut(text: str, limit: int = REASON_LIMIT) -> str:
    """An operator's reason or note as kept: stripped, and at most `limit` characters; a longer
    one ends with a mark saying how much was cut, so nobody reads it as whole."""
    text = (text or "").strip()
    if len(text) <= limit:
        return text
    mark = f" … [cut from {len(text)} characters]"
    return text[: limit - len(mark)] + mark[:limit]


def name_of(obj: Any) -> str:
    for field_name in NAME_FIELDS:
        value = getattr(obj, field_name, None)
        if value:
            return str(value)[:255]
    return str(obj)[:255]


@contextmanager
def in_run(run: Any) -> Iterator[None]:
    """Entries recorded inside belong to bulk run `run`."""
    token = _current_run.set(run)
    try:
        yield
    finally:
        _current_run.reset(token)


def record(
    actor: str,
    action: str,
    obj: Any,
    status_before: str = "",
    status_after: str = "",
    detail: str = "",
    *,
    user: Any = None,
) -> AuditEntry:
    return AuditEntry.objects.create(
        created_at=timezone.now(),
        actor=actor,
        action=action,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        object_name=name_of(obj),
        run=_current_run.get(),
        status_before=status_before,
        status_after=status_after,
        detail=detail,
        user=user if getattr(user, "pk", None) else None,
    )
