from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from idemdash.core.actions import OperatorAction, act_on_each
from idemdash.core.columns import FilterSafe, ReadOnlyInline, ReferenceInline, SearchesReferences, clipped, to_the_second
from idemdash.core.columns import pretty_json as _pretty_json
from receipts.outbox import operator_actions, pauses
from receipts.outbox.models import MessageReference, OutboxAttempt, OutboxMessage, OutboxPause
from receipts.references import cause_of


class OutboxAttemptInline(ReadOnlyInline):
    model = OutboxAttempt
    fields = ("number", "outcome", "status_code", "duration_ms", "error", "drainer", "created_at")
    ordering = ("-created_at",)


def _repair(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet, action: OperatorAction,
            label: str) -> None:
    done, refused = act_on_each(queryset, action, actor=request.user.get_username(), user=request.user)
    modeladmin.message_user(request, f"{label}: {done} message(s).", messages.SUCCESS)
    if refused:
        modeladmin.message_user(request, f"{len(refused)} message(s) were not in a state that allows it.",
                                messages.WARNING)


class MessageReferenceInline(ReferenceInline):
    model = MessageReference


@admin.register(OutboxMessage)
class OutboxMessageAdmin(SearchesReferences, FilterSafe, admin.ModelAdmin):
    list_display = (clipped("key"), clipped("scope", width=20), "action", "status", "attempts",
                    to_the_second("next_attempt_at", "next attempt"), to_the_second("sent_at", "sent"))
    list_filter = ("status", "action")
    search_fields = ("key", "scope")  # and a reference's exact value (SearchesReferences)
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    inlines = [OutboxAttemptInline, MessageReferenceInline]
    actions = ["send_now", "send_again", "release"]
    # Everything is read-only: a message changes only through the drain and the audited
    # operator actions below. The payload is shown as the dashboard shows it, credentials masked
    # (pretty_json masks by kind),
    # and the raw field is never on the page (nor in the form).
    readonly_fields = [
        *(f.name if f.name != "payload" else "payload_masked" for f in OutboxMessage._meta.fields), "cause",
    ]
    exclude = ["payload"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="payload")
    def payload_masked(self, obj: OutboxMessage) -> str:
        return _pretty_json(obj.payload)

    @admin.display(description="caused by")
    def cause(self, obj: OutboxMessage) -> str:
        """What it was enqueued under, linked to its admin page (clients/python/idemdash_client/references.py)."""
        if not obj.cause_kind:
            return "–"
        found = cause_of(obj)
        if found is None:
            return f"{obj.cause_kind.replace('_', ' ')} #{obj.cause_id} (purged)"
        url = reverse(f"admin:{found._meta.app_label}_{found._meta.model_name}_change", args=[found.pk])
        return format_html('<a href="{}">{}</a>', url, found)

    @admin.action(description="Send now", permissions=["change"])
    def send_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        _repair(self, request, queryset, operator_actions.SEND_NOW, "Due now")

    @admin.action(description="Send again (dead)", permissions=["change"])
    def send_again(self, request: HttpRequest, queryset: QuerySet) -> None:
        _repair(self, request, queryset, operator_actions.SEND_AGAIN, "Sent again")

    @admin.action(description="Release (stuck: in flight past its lease)", permissions=["change"])
    def release(self, request: HttpRequest, queryset: QuerySet) -> None:
        _repair(self, request, queryset, operator_actions.RELEASE, "Released")


@admin.register(OutboxAttempt)
class OutboxAttemptAdmin(FilterSafe, admin.ModelAdmin):
    """Read-only: the attempt log, which outlives the messages retention deletes."""

    list_display = (to_the_second("created_at", "at"), clipped("key"), "action", "number", "outcome", "status_code",
                    "duration_ms", clipped("drainer", width=20))
    list_filter = ("outcome", "action")
    search_fields = ("key", "drainer")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    readonly_fields = [f.name for f in OutboxAttempt._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class PauseForm(forms.ModelForm):
    class Meta:
        model = OutboxPause
        fields = ("kind", "target", "note")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        # Normalised here (a host lower case), so that save_model pauses what was checked.
        try:
            data["kind"], data["target"] = pauses.normalise(data.get("kind", ""), data.get("target", ""))
        except pauses.InvalidPause as exc:
            raise forms.ValidationError(str(exc)) from None
        # Pausing what is paused is harmless (pauses.pause says so), not a form error: the
        # form then stands for the existing pause, which the uniqueness check leaves alone.
        existing = OutboxPause.objects.filter(kind=data["kind"], target=data["target"]).first()
        if existing is not None:
            self.instance = existing
        return data


@admin.register(OutboxPause)
class OutboxPauseAdmin(admin.ModelAdmin):
    """Pausing and resuming through receipts/outbox/pauses.py, as the dashboard does: adding a
    pause is `pauses.pause` (audited; a second one for the same target changes nothing), and
    the one way to end it is the Resume action (audited; the worker drains the backlog)."""

    list_display = ("kind", "target", "paused_by", to_the_second("paused_at", "since"), "waiting", "oldest_waiting",
                    "note")
    list_filter = ("kind",)
    fields = ("kind", "target", "note")
    actions = ["resume"]
    form = PauseForm

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # resuming is the Resume action: it drains the backlog and is audited

    @admin.display(description="messages waiting")
    def waiting(self, obj: OutboxPause) -> int:
        return pauses.backlog(obj).waiting

    @admin.display(description="oldest waiting since")
    def oldest_waiting(self, obj: OutboxPause) -> str:
        oldest = pauses.backlog(obj).oldest
        return f"{oldest:%Y-%m-%d %H:%M:%S} UTC" if oldest else "-"

    def save_model(self, request: HttpRequest, obj: OutboxPause, form: Any, change: bool) -> None:
        done = pauses.pause(obj.kind, obj.target, actor=request.user.get_username(), user=request.user, note=obj.note)
        if not done:
            self.message_user(request, f"{obj.get_kind_display()} {obj.target} was paused already.", messages.WARNING)
        # The row the admin would show is the one pauses.pause wrote (or found).
        obj.pk = OutboxPause.objects.get(kind=obj.kind, target=obj.target).pk

    @admin.action(description="Resume sending (the worker drains what waited)", permissions=["add"])
    def resume(self, request: HttpRequest, queryset: QuerySet) -> None:
        done = sum(pauses.resume(p.kind, p.target, actor=request.user.get_username(), user=request.user)
                   for p in queryset)
        self.message_user(request, f"Resumed {done} pause(s); the worker drains what waited.", messages.SUCCESS)
