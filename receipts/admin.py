"""Admin for receipts, read-only: a receipt changes state only through the operator actions
the dashboard serves too (receipts/operator_actions.py)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from idemdash.core.actions import act_on_each
from idemdash.core.columns import FilterSafe, ReadOnlyAdmin, ReferenceInline, SearchesReferences, clipped, to_the_second
from idemdash.core.columns import pre as _pre
from idemdash.core.columns import pretty_json as _pretty_json
from receipts import responses, store
from receipts.conf import policy_for
from receipts.downstream import downstream_key
from receipts.models import ArchivedReceipt, Attempt, Receipt, ReceiptReference
from receipts.operator_actions import MARK_COMPLETED, RELEASE, RUN_AGAIN


class StoredResultDisplay:
    """The stored request and response of a receipt (live or archived), pretty-printed."""

    @admin.display(description="request")
    def request_pretty(self, obj: Receipt | ArchivedReceipt) -> str:
        return _pretty_json(obj.request)

    @admin.display(description="response body")
    def response_pretty(self, obj: Receipt | ArchivedReceipt) -> str:
        content, headers = responses.decode(obj.response_body)
        text = content.decode("utf-8", "replace")
        if "json" in obj.response_content_type:
            with contextlib.suppress(ValueError):
                text = json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False)
        if headers:
            text = "\n".join(f"{name}: {value}" for name, value in headers.items()) + "\n\n" + text
        return _pre(text)


class ReceiptReferenceInline(ReferenceInline):
    model = ReceiptReference


@admin.register(Receipt)
class ReceiptAdmin(SearchesReferences, FilterSafe, StoredResultDisplay, admin.ModelAdmin):
    list_display = (clipped("key"), clipped("scope", width=20), "operation", "state", "attempts", "response_status",
                    to_the_second("created_at", "created"))
    list_filter = ("status", "operation", "scope")
    search_fields = ("key",)  # and a reference's exact value (SearchesReferences)
    date_hierarchy = "created_at"
    actions = ["release", "mark_completed", "run_again"]
    inlines = [ReceiptReferenceInline]
    fields = (
        "scope", "key", "operation", "status", "retryable", "attempts", "fencing_token", "lease_expires_at",
        "fingerprint", "request_pretty", "response_status", "response_content_type", "response_pretty", "error",
        "user_id", "session_id", "created_at", "updated_at", "completed_at", "expires", "policy", "downstream",
    )
    readonly_fields = fields

    @admin.display(description="downstream key")
    def downstream(self, obj: Receipt) -> str:
        return downstream_key(obj.scope, obj.key, obj.created_at)

    @admin.display(description="status", ordering="status")
    def state(self, obj: Receipt) -> str:
        return obj.shown_status

    @admin.display(description="expires at")
    def expires(self, obj: Receipt) -> Any:
        return "permanent (never expires)" if obj.permanent else obj.expires_at

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="policy (today's settings)")
    def policy(self, obj: Receipt) -> str:
        policy = policy_for(obj.operation)
        return format_html(
            "{} · TTL {} · lease {} s · on failure: {}<br>matched: {}",
            "financial" if policy.financial else "not financial",
            "permanent" if policy.permanent else f"{policy.ttl_seconds} s",
            int(policy.lease.total_seconds()),
            policy.on_failure,
            policy.matched(),
        )

    @admin.action(description="Release selected receipts", permissions=["change"])
    def release(self, request: HttpRequest, queryset: QuerySet[Receipt]) -> None:
        released, refused = act_on_each(queryset, RELEASE, actor=request.user.get_username(), user=request.user,
                                         reason="released from the admin")
        self._report(request, f"Released {released} receipt(s).", refused,
                     "completed receipts keep their result, and some changed meanwhile.")

    @admin.action(description="Mark selected outcome-unknown receipts completed (with a result)",
                  permissions=["change"])
    def mark_completed(self, request: HttpRequest, queryset: QuerySet[Receipt]) -> HttpResponse | None:
        form = ResultForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            done, refused = act_on_each(queryset, MARK_COMPLETED, actor=request.user.get_username(), user=request.user,
                                        reason=form.cleaned_data["reason"] or "marked completed from the admin",
                                        result=form.cleaned_data["result"])
            invalid = next((exc for _, exc in refused if isinstance(exc, store.InvalidResult)), None)
            if invalid is None:
                self._report(request, f"{MARK_COMPLETED.verb}: {done} receipt(s).", refused, REPAIRED_ONLY)
                return None
            form.add_error("result", str(invalid))  # the result is refused for every row: nothing was stored
        return TemplateResponse(request, "admin/receipts/receipt/mark_completed.html", {
            **self.admin_site.each_context(request),
            "title": "Mark outcome-unknown receipts completed",
            "opts": self.model._meta,
            "form": form,
            "receipts": [(receipt, downstream_key(receipt.scope, receipt.key, receipt.created_at)) for receipt in queryset],
            "explain": MARK_COMPLETED.explain,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        })

    @admin.action(description="Run selected outcome-unknown receipts again", permissions=["change"])
    def run_again(self, request: HttpRequest, queryset: QuerySet[Receipt]) -> None:
        done, refused = act_on_each(queryset, RUN_AGAIN, actor=request.user.get_username(), user=request.user,
                                    reason="run again from the admin")
        self._report(request, f"{RUN_AGAIN.verb}: {done} receipt(s).", refused, REPAIRED_ONLY)

    def _report(self, request: HttpRequest, done: str, refused: list, skipped_because: str) -> None:
        self.message_user(request, done, messages.SUCCESS)
        if refused:
            self.message_user(request, f"Skipped {len(refused)}: {skipped_because}", messages.WARNING)


REPAIRED_ONLY = ("only an outcome-unknown receipt (its attempt stopped before it settled, under after_crash "
                 '"hold") is repaired so, and some may have changed meanwhile.')


class ResultForm(forms.Form):
    """What an operator gives to mark a held receipt completed; store.mark_completed checks the JSON."""

    result = forms.CharField(label=MARK_COMPLETED.input, widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
                             help_text='The result the provider shows for the downstream key, e.g. {"message_id": "m-42"}.')
    reason = forms.CharField(required=False, max_length=500, widget=forms.TextInput(attrs={"size": 60}),
                             help_text="Goes to the audit log.")


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = (to_the_second("created_at", "at"), clipped("key"), clipped("scope", width=20), "operation", "outcome",
                    "fencing_token", "actor")
    list_filter = ("outcome", "operation")
    search_fields = ("key",)
    date_hierarchy = "created_at"
    fields = (
        "created_at", "scope", "key", "operation", "receipt_link", "outcome", "waited_ms", "fencing_token",
        "fingerprint", "request", "detail", "actor",
    )
    readonly_fields = fields

    @admin.display(description="receipt")
    def receipt_link(self, obj: Attempt) -> str:
        # Never obj.receipt, which raises for a purged one.
        if obj.receipt_id is None:
            return self.get_empty_value_display()
        if not Receipt.objects.filter(pk=obj.receipt_id).exists():
            return f"{obj.receipt_id} (purged; the scope and key above are the attempt's own copy)"
        url = reverse("admin:receipts_receipt_change", args=[obj.receipt_id])
        return format_html('<a href="{}">{}</a>', url, obj.receipt_id)


@admin.register(ArchivedReceipt)
class ArchivedReceiptAdmin(StoredResultDisplay, ReadOnlyAdmin):
    """Financial receipts kept after their expiry: the record of what a key once did."""

    list_display = (clipped("key"), clipped("scope", width=20), "operation", "status", "response_status",
                    to_the_second("created_at", "created"), to_the_second("archived_at", "archived"))
    list_filter = ("status", "operation")
    search_fields = ("key", "scope")
    date_hierarchy = "archived_at"
    fields = (
        "original_id", "scope", "key", "operation", "status", "retryable", "attempts", "fingerprint",
        "request_pretty", "response_status", "response_content_type", "response_pretty", "error",
        "user_id", "session_id", "created_at", "completed_at", "expires_at", "compacted_at", "archived_at",
    )
    readonly_fields = fields
