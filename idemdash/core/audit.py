"""The audit log: who did what to which object. Every operator action and manual repair of
every app is recorded here, by the domain function that performs it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEntry(models.Model):
    """Who did what to which object: every operator action and every manual repair."""

    created_at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=255)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=255)
    status_before = models.CharField(max_length=32, blank=True)
    status_after = models.CharField(max_length=32, blank=True)
    detail = models.TextField(blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        # Shared by every app; its table, permissions and migration stay the receipts
        # app's (receipts_auditentry), the app every other one requires.
        app_label = "receipts"
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_object")]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.object_type}:{self.object_id}"


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
        status_before=status_before,
        status_after=status_after,
        detail=detail,
        user=user if getattr(user, "pk", None) else None,
    )
