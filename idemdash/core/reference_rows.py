"""The stored references (clients/python/idemdash_client/references.py): one table per kind of object, each
app's own (receipts.ReceiptReference, webhooks.EventReference, outbox.MessageReference),
because the apps are installed separately and a row points at exactly one object with a
real foreign key that its purge follows.

Each table is indexed for the two questions asked of it: "what does this object refer to"
(the unique (owner, kind, value), which also makes storing a reference twice harmless) and
"which objects refer to this value" (value, and kind + value), an index lookup however
many rows there are.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models
from django.db.models import Model, QuerySet
from django.utils import timezone


class Reference(models.Model):
    """(kind, value) about one object; each app's subclass adds the object's foreign key."""

    kind = models.CharField(max_length=64)
    value = models.CharField(max_length=255)
    created_at = models.DateTimeField()

    # The foreign key's name on each subclass.
    OWNER: str = ""

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.kind}: {self.value}"

    @classmethod
    def store(cls, owner_id: int, references: Iterable[tuple[str, str]]) -> None:
        """Write (kind, value) pairs about one object in the caller's transaction; a pair
        already stored for it (an earlier attempt referred to it too) is left as it is."""
        now = timezone.now()
        rows = [cls(**{f"{cls.OWNER}_id": owner_id}, kind=kind, value=value, created_at=now) for kind, value in references]
        if rows:
            cls.objects.bulk_create(rows, ignore_conflicts=True)


def meta_options(owner: str, table: str) -> tuple[list, list]:
    """(constraints, indexes) of a subclass whose foreign key is `owner` (see above), named
    after `table`: `constraints, indexes = meta_options("receipt", "receipt_ref")` in its Meta."""
    return (
        [models.UniqueConstraint(fields=[owner, "kind", "value"], name=f"{table}_uniq")],
        [
            models.Index(fields=["value"], name=f"{table}_value"),
            models.Index(fields=["kind", "value"], name=f"{table}_kind_value"),
        ],
    )


def referring(rows: QuerySet | type[Model], value: str, kind: str | None = None) -> QuerySet:
    """`rows` (a queryset or a model with a `references` relation: Receipt, WebhookEvent,
    OutboxMessage) that have a reference `value` (of `kind`, when given): a filter for their
    lists and their admin search, a semi-join on the references' value index."""
    rows = rows if isinstance(rows, QuerySet) else rows.objects.all()
    relation = rows.model._meta.get_field("references")
    references = relation.related_model.objects.filter(value=value)
    if kind:
        references = references.filter(kind=kind)
    return rows.filter(pk__in=references.values(relation.field.attname))


def listed(rows: Iterable[Reference]) -> list[dict[str, str]]:
    """References as the JSON API shows them."""
    return [{"kind": row.kind, "value": row.value} for row in rows]
