from __future__ import annotations

import base64
from datetime import datetime

from django import forms
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils.dateparse import parse_datetime

from receipts.models import Attempt, Receipt
from receipts.references import referring
from receipts.outbox.models import OutboxMessage
from webhooks.models import RejectedDelivery, WebhookEndpoint, WebhookEvent

# "Which keys had concurrent duplicates (409s, waits) / 422s?": receipts with at least one such attempt.
CONFLICTS = {"concurrent": Attempt.CONCURRENT_OUTCOMES, "422": (Attempt.Outcome.MISMATCH,)}

SORTS = {
    "-created": ("created_at", True),
    "created": ("created_at", False),
    "-updated": ("updated_at", True),
    "updated": ("updated_at", False),
}
PAGE_SIZE = 50


class BadCursor(ValueError):
    pass


def _reference_field() -> forms.CharField:
    # Exact, as references are stored (receipts/references.py): an index lookup at any size.
    return forms.CharField(required=False, max_length=255, label="Reference", strip=True)


def _by_reference(qs: QuerySet, value: str | None) -> QuerySet:
    """`qs` narrowed to the rows with a reference `value`, when one is given."""
    return referring(qs, value) if value else qs


def encode_cursor(moment: datetime, pk: int) -> str:
    return base64.urlsafe_b64encode(f"{moment.isoformat()}|{pk}".encode()).decode().rstrip("=")


def decode_cursor(raw: str) -> tuple[datetime, int]:
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
        moment_text, _, pk_text = text.rpartition("|")
        moment = parse_datetime(moment_text)
        if moment is None:
            raise ValueError
        return moment, int(pk_text)
    except ValueError as exc:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise BadCursor("The page cursor is not valid; start from the first page.") from exc


# A released receipt is failed with the release marker (Receipt.released): the list shows
# and filters it apart, and "failed" means failed and not released.
RELEASED = "released"
RECEIPT_STATUSES = {
    Receipt.Status.FAILED: Q(status=Receipt.Status.FAILED, released_at=None),
    RELEASED: Q(status=Receipt.Status.FAILED, released_at__isnull=False),
}


class ReceiptFilter(forms.Form):
    """The receipts list's filters. The same form scopes the bulk-release preview.

    Each list's form gives the list page (idemdash/dashboard/views/pages.py:filtered_list)
    its `rows()` and their `ordering()`: the field and whether descending."""

    q = forms.CharField(required=False, max_length=255, label="Key starts with")
    status = forms.ChoiceField(
        required=False,
        choices=[("", "Any status"), *Receipt.Status.choices, (RELEASED, "Released (next attempt will run)")],
    )
    operation = forms.CharField(required=False, max_length=100)
    scope = forms.CharField(required=False, max_length=255)
    ref = _reference_field()
    conflict = forms.ChoiceField(
        required=False, choices=[("", "Any"), ("concurrent", "Had a concurrent duplicate (409 or waited)"), ("422", "Had a 422 (mismatch)")]
    )
    since = forms.DateTimeField(required=False, label="Created from")
    until = forms.DateTimeField(required=False, label="Created until")
    sort = forms.ChoiceField(
        required=False,
        choices=[("-created", "Newest first"), ("created", "Oldest first"),
                 ("-updated", "Recently changed"), ("updated", "Least recently changed")],
    )

    def rows(self) -> QuerySet[Receipt]:
        data = self.cleaned_data
        qs = Receipt.objects.all()
        if data.get("q"):
            qs = qs.filter(key__startswith=data["q"])
        status = data.get("status")
        if status:
            qs = qs.filter(RECEIPT_STATUSES.get(status, Q(status=status)))
        for name in ("operation", "scope"):
            if data.get(name):
                qs = qs.filter(**{name: data[name]})
        if data.get("conflict"):
            outcomes = CONFLICTS[data["conflict"]]
            qs = qs.filter(Exists(Attempt.objects.filter(receipt=OuterRef("pk"), outcome__in=outcomes)))
        if data.get("since"):
            qs = qs.filter(created_at__gte=data["since"])
        if data.get("until"):
            qs = qs.filter(created_at__lte=data["until"])
        return _by_reference(qs, data.get("ref"))

    def ordering(self) -> tuple[str, bool]:
        return SORTS[self.cleaned_data.get("sort") or "-created"]

    def is_filtered(self) -> bool:
        return any(self.cleaned_data.get(n) for n in ("q", "status", "operation", "scope", "ref", "conflict", "since", "until"))


def keyset_page(qs: QuerySet, field: str, descending: bool, after: str | None) -> tuple[list, str | None]:
    """One page ordered by (field, id), continuing after the cursor: no OFFSET, so page
    10 000 costs what page 1 costs."""
    if after:
        moment, pk = decode_cursor(after)
        op = "lt" if descending else "gt"
        qs = qs.filter(Q(**{f"{field}__{op}": moment}) | Q(**{field: moment, f"id__{op}": pk}))
    prefix = "-" if descending else ""
    rows = list(qs.order_by(f"{prefix}{field}", f"{prefix}id")[: PAGE_SIZE + 1])
    if len(rows) > PAGE_SIZE:
        rows = rows[:PAGE_SIZE]
        last = rows[-1]
        return rows, encode_cursor(getattr(last, field), last.pk)
    return rows, None


# --- webhooks and outbox ----------------------------------------------------------------------


class _TimeFiltered(forms.Form):
    since = forms.DateTimeField(required=False, label="From")
    until = forms.DateTimeField(required=False, label="Until")

    time_field = "created_at"
    names: tuple[str, ...] = ()
    # The filters that are one exact lookup each: form field -> ORM lookup.
    lookups: dict[str, str] = {}

    def _filtered(self, qs: QuerySet) -> QuerySet:
        """`qs` narrowed by every filled-in lookup filter, the reference (for a form that has
        one) and the time range."""
        for name, lookup in self.lookups.items():
            if self.cleaned_data.get(name):
                qs = qs.filter(**{lookup: self.cleaned_data[name]})
        return _by_reference(self._time(qs), self.cleaned_data.get("ref"))

    def _time(self, qs: QuerySet) -> QuerySet:
        if self.cleaned_data.get("since"):
            qs = qs.filter(**{f"{self.time_field}__gte": self.cleaned_data["since"]})
        if self.cleaned_data.get("until"):
            qs = qs.filter(**{f"{self.time_field}__lte": self.cleaned_data["until"]})
        return qs

    def ordering(self) -> tuple[str, bool]:
        return self.time_field, True  # newest first

    def is_filtered(self) -> bool:
        return any(self.cleaned_data.get(n) for n in (*self.names, "since", "until"))


def _provider_choices() -> list[tuple[str, str]]:
    return [("", "Any provider"), *WebhookEndpoint.Provider.choices]


class EventFilter(_TimeFiltered):
    """Webhook events: by endpoint, provider, type, status and first-delivery time."""

    endpoint = forms.CharField(required=False, max_length=64, label="Endpoint slug")
    provider = forms.ChoiceField(required=False, choices=_provider_choices)
    type = forms.CharField(required=False, max_length=255, label="Event type")
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *WebhookEvent.Status.choices])
    q = forms.CharField(required=False, max_length=255, label="Event id starts with")
    ref = _reference_field()

    time_field = "received_at"
    names = ("endpoint", "provider", "type", "status", "q", "ref")
    lookups = {"endpoint": "endpoint__slug", "provider": "provider", "type": "event_type", "status": "status"}

    def endpoint_slugs(self) -> QuerySet:
        """What the endpoint field suggests."""
        return WebhookEndpoint.objects.order_by("slug").values_list("slug", flat=True)

    def rows(self) -> QuerySet[WebhookEvent]:
        qs = WebhookEvent.objects.select_related("endpoint")
        if q := self.cleaned_data.get("q"):
            qs = qs.filter(Q(provider_event_id__startswith=q) | Q(dedupe_key__startswith=q))
        return self._filtered(qs)


class RejectedFilter(_TimeFiltered):
    endpoint = forms.CharField(required=False, max_length=64, label="Endpoint slug")
    provider = forms.ChoiceField(required=False, choices=_provider_choices)
    cause = forms.ChoiceField(required=False, choices=[("", "Any cause"), *RejectedDelivery.Cause.choices])

    time_field = "received_at"
    names = ("endpoint", "provider", "cause")
    lookups = {"endpoint": "endpoint__slug", "provider": "provider", "cause": "cause"}

    def rows(self) -> QuerySet[RejectedDelivery]:
        return self._filtered(RejectedDelivery.objects.select_related("endpoint"))


# "waiting" is the backlog tile's filter: everything the drain has yet to send.
WAITING = "waiting"


class OutboxFilter(_TimeFiltered):
    action = forms.CharField(required=False, max_length=100)
    status = forms.ChoiceField(
        required=False,
        choices=[("", "Any status"), (WAITING, "Waiting (pending or retry)"), *OutboxMessage.Status.choices],
    )
    q = forms.CharField(required=False, max_length=255, label="Key starts with")
    scope = forms.CharField(required=False, max_length=255)
    ref = _reference_field()

    names = ("action", "status", "q", "scope", "ref")
    lookups = {"action": "action", "q": "key__startswith", "scope": "scope"}

    def action_names(self) -> QuerySet:
        """What the action field suggests: the actions messages were enqueued with."""
        return OutboxMessage.objects.order_by("action").values_list("action", flat=True).distinct()

    def rows(self) -> QuerySet[OutboxMessage]:
        qs = OutboxMessage.objects.all()
        status = self.cleaned_data.get("status")
        if status == WAITING:
            qs = qs.filter(status__in=[OutboxMessage.Status.PENDING, OutboxMessage.Status.RETRY])
        elif status:
            qs = qs.filter(status=status)
        return self._filtered(qs)


def _audit_kind_choices() -> list[tuple[str, str]]:
    from idemdash.dashboard.queries import AUDIT_NOUNS  # it imports this module's models' apps

    return [("", "Any kind"), *sorted(AUDIT_NOUNS.items(), key=lambda choice: choice[1])]


class AuditFilter(_TimeFiltered):
    """The audit log's filters. The entries a bulk run's items wrote are grouped under the
    run's own entry, unless the filter asks for them: a run, an object or an action."""

    actor = forms.CharField(required=False, max_length=255, label="Who")
    action = forms.CharField(required=False, max_length=64, label="Action")
    kind = forms.ChoiceField(required=False, choices=_audit_kind_choices, label="Kind")
    object = forms.CharField(required=False, max_length=255, label="Object",
                             help_text="its key, event id or name as the log shows it, or its id")
    run = forms.IntegerField(required=False, min_value=1, max_value=2**63 - 1, label="Bulk run")
    after_id = forms.IntegerField(required=False, min_value=0, label="After entry")
    through_id = forms.IntegerField(required=False, min_value=0, label="Through entry")

    names = ("actor", "action", "kind", "object", "run", "after_id", "through_id")
    lookups = {"actor": "actor", "action": "action", "kind": "object_type", "run": "run_id",
               "after_id": "id__gt", "through_id": "id__lte"}

    def entries(self, qs: QuerySet) -> QuerySet:
        qs = self._filtered(qs)
        data = self.cleaned_data
        if data.get("object"):
            qs = qs.filter(Q(object_name=data["object"]) | Q(object_id=data["object"]))
        if not any(data.get(name) not in (None, "") for name in ("run", "object", "action", "after_id")):
            qs = qs.filter(run=None)
        return qs
