from __future__ import annotations

import base64
from datetime import datetime

from django import forms
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils.dateparse import parse_datetime

from idemdash.dashboard.alert_rules import PERCENT_METRICS, parse_window_minutes, window_label
from idemdash.dashboard.models import Alert, AlertRule, Incident
from receipts.models import Attempt, Receipt
from receipts.references import referring
from receipts.outbox.models import OutboxMessage
from webhooks.models import RejectedDelivery, WebhookEndpoint, WebhookEvent

# "Which keys had concurrent duplicates (409s, waits) / 422s?": receipts with at least one such attempt.
CONFLICTS = {"concurrent": Attempt.CONCURRENT_OUTCOMES, "422": (Attempt.Outcome.MISMATCH,)}

PAGE_SIZE = 50


class BadCursor(ValueError):
    pass


def _reference_field() -> forms.CharField:
    # Exact, as references are stored (receipts/references.py): an index lookup at any size.
    return forms.CharField(required=False, max_length=255, label="Reference", strip=True)


class ListFilter(forms.Form):
    """A list's filters. Each list's form gives the list page
    (idemdash/dashboard/views/pages.py:filtered_list) its `rows()` and their `ordering()`:
    the field and whether descending; `filtered(qs)` applies what every form shares."""

    since = forms.DateTimeField(required=False, label="From")
    until = forms.DateTimeField(required=False, label="Until")

    time_field = "created_at"
    # The filters that are one exact lookup each: form field -> ORM lookup.
    lookups: dict[str, str] = {}

    def filtered(self, qs: QuerySet) -> QuerySet:
        """`qs` narrowed by every filled-in lookup filter, the time range and the reference
        (for a form that has them)."""
        data = self.cleaned_data
        for name, lookup in self.lookups.items():
            if data.get(name):
                qs = qs.filter(**{lookup: data[name]})
        if data.get("since"):
            qs = qs.filter(**{f"{self.time_field}__gte": data["since"]})
        if data.get("until"):
            qs = qs.filter(**{f"{self.time_field}__lte": data["until"]})
        return referring(qs, data["ref"]) if data.get("ref") else qs

    def ordering(self) -> tuple[str, bool]:
        return self.time_field, True  # newest first

    def is_filtered(self) -> bool:
        return any(self.cleaned_data.get(name) for name in self.fields if name != "sort")


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


class ReceiptFilter(ListFilter):
    """The receipts list's filters. The same form scopes the bulk-release preview."""

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

    field_order = ["q", "status", "operation", "scope", "ref", "conflict", "since", "until", "sort"]
    lookups = {"q": "key__startswith", "operation": "operation", "scope": "scope"}

    def rows(self) -> QuerySet[Receipt]:
        qs = Receipt.objects.all()
        if status := self.cleaned_data.get("status"):
            qs = qs.filter(RECEIPT_STATUSES.get(status, Q(status=status)))
        if conflict := self.cleaned_data.get("conflict"):
            qs = qs.filter(Exists(Attempt.objects.filter(receipt=OuterRef("pk"), outcome__in=CONFLICTS[conflict])))
        return self.filtered(qs)

    def ordering(self) -> tuple[str, bool]:
        sort = self.cleaned_data.get("sort") or "-created"  # "-updated": updated_at, descending
        return f"{sort.removeprefix('-')}_at", sort.startswith("-")


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


def _group_field() -> forms.Field:
    """The failure group of a unit's last failure (the Failures page links with it): kept by
    the list's form and its bulk action, so that a group is repaired from the same preview."""
    return forms.RegexField(r"^[0-9a-f]{32}$", required=False, widget=forms.HiddenInput,
                            error_messages={"invalid": "A failure group is 32 hex digits."})


class DeliveryFilter(ListFilter):
    """What the events' and the rejected deliveries' filters share: the endpoint, its provider
    and the time a delivery came."""

    endpoint = forms.CharField(required=False, max_length=64, label="Endpoint slug")
    provider = forms.ChoiceField(required=False, choices=[("", "Any provider"), *WebhookEndpoint.Provider.choices])

    time_field = "received_at"
    lookups = {"endpoint": "endpoint__slug", "provider": "provider"}


class EventFilter(DeliveryFilter):
    """Webhook events: by endpoint, provider, type, status and first-delivery time."""

    type = forms.CharField(required=False, max_length=255, label="Event type")
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *WebhookEvent.Status.choices])
    q = forms.CharField(required=False, max_length=255, label="Event id starts with")
    ref = _reference_field()
    group = _group_field()

    lookups = {**DeliveryFilter.lookups, "type": "event_type", "status": "status", "group": "failure_signature"}

    def endpoint_slugs(self) -> QuerySet:
        """What the endpoint field suggests."""
        return WebhookEndpoint.objects.order_by("slug").values_list("slug", flat=True)

    def rows(self) -> QuerySet[WebhookEvent]:
        qs = WebhookEvent.objects.select_related("endpoint")
        if q := self.cleaned_data.get("q"):
            qs = qs.filter(Q(provider_event_id__startswith=q) | Q(dedupe_key__startswith=q))
        return self.filtered(qs)


class RejectedFilter(DeliveryFilter):
    cause = forms.ChoiceField(required=False, choices=[("", "Any cause"), *RejectedDelivery.Cause.choices])

    lookups = {**DeliveryFilter.lookups, "cause": "cause"}

    def rows(self) -> QuerySet[RejectedDelivery]:
        return self.filtered(RejectedDelivery.objects.select_related("endpoint"))


# "waiting" is the backlog tile's filter: everything the drain has yet to send.
WAITING = "waiting"


class OutboxFilter(ListFilter):
    action = forms.CharField(required=False, max_length=100)
    status = forms.ChoiceField(
        required=False,
        choices=[("", "Any status"), (WAITING, "Waiting (pending or retry)"), *OutboxMessage.Status.choices],
    )
    q = forms.CharField(required=False, max_length=255, label="Key starts with")
    scope = forms.CharField(required=False, max_length=255)
    ref = _reference_field()
    group = _group_field()

    lookups = {"action": "action", "q": "key__startswith", "scope": "scope", "group": "failure_signature"}

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
        return self.filtered(qs)


def _audit_kind_choices() -> list[tuple[str, str]]:
    from idemdash.dashboard.queries import AUDIT_NOUNS  # it imports this module's models' apps

    return [("", "Any kind"), *sorted(AUDIT_NOUNS.items(), key=lambda choice: choice[1])]


class AuditFilter(ListFilter):
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

    lookups = {"actor": "actor", "kind": "object_type", "run": "run_id", "after_id": "id__gt", "through_id": "id__lte"}

    def entries(self, qs: QuerySet) -> QuerySet:
        from idemdash.dashboard.queries import audit_actions

        qs = self.filtered(qs)
        data = self.cleaned_data
        if data.get("action"):  # its stored name or the verb the log shows
            qs = qs.filter(action__in=audit_actions(data["action"]))
        if data.get("object"):
            qs = qs.filter(Q(object_name=data["object"]) | Q(object_id=data["object"]))
        if not any(data.get(name) not in (None, "") for name in ("run", "object", "action", "after_id")):
            qs = qs.filter(run=None)
        return qs


# --- alerts and incidents ---------------------------------------------------------------------


class AlertRuleForm(forms.ModelForm):
    """A rule as operators type it. The target (AlertRule.clean) and the threshold (its
    field's validator) are checked by the model, as in the admin's form."""

    window = forms.CharField(
        max_length=12, initial="1h",
        help_text="1h, 24h, 7d, 30d, or minutes such as 15m. Ignored by stuck rows and backlog age, "
                  "which describe the present.",
    )

    field_order = ["name", "metric", "comparison", "threshold", "window", "channel", "target", "enabled"]

    class Meta:
        model = AlertRule
        fields = ["name", "metric", "comparison", "threshold", "channel", "target", "enabled"]
        labels = {"threshold": "Threshold (in the tile's unit)"}
        help_texts = {
            "threshold": "As the overview's tile shows the figure: for the duplicate rate a percentage "
                         "(20 means 20%), for the backlog age seconds, otherwise a count.",
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["window"] = window_label(self.instance.window_minutes)

    def clean_window(self) -> str:
        self.instance.window_minutes = parse_window_minutes(self.cleaned_data["window"])
        return self.cleaned_data["window"]

    def clean(self) -> dict:
        data = super().clean()
        if data.get("metric") in PERCENT_METRICS and (data.get("threshold") or 0) >= 100:
            self.add_error("threshold", "The duplicate rate is a percentage below 100: 20 means 20%.")
        return data


class AlertFilter(ListFilter):
    rule = forms.ModelChoiceField(AlertRule.objects.all(), required=False, empty_label="Any rule")
    state = forms.ChoiceField(required=False, choices=[("", "Any state"), *Alert.State.choices])
    since = until = None

    lookups = {"rule": "rule", "state": "state"}

    def rows(self) -> QuerySet[Alert]:
        return self.filtered(Alert.objects.select_related("rule"))


class IncidentFilter(ListFilter):
    state = forms.ChoiceField(required=False, choices=[("", "Any state"), *Incident.State.choices])
    rule = forms.ModelChoiceField(AlertRule.objects.all(), required=False, empty_label="Any rule")
    since = until = None

    lookups = {"state": "state", "rule": "alert__rule"}

    def rows(self) -> QuerySet[Incident]:
        return self.filtered(Incident.objects.select_related("alert", "alert__rule"))


class AcknowledgeForm(forms.Form):
    note = forms.CharField(
        required=False, max_length=2000, strip=True,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "What you are doing about it"}),
        help_text="Kept on the incident and in the audit log.",
    )
