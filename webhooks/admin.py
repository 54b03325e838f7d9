from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from idemdash.core.actions import OperatorAction, act_on_each
from idemdash.core.columns import FilterSafe, ReadOnlyInline, ReferenceInline, SearchesReferences, clipped, to_the_second
from webhooks import endpoints, operator_actions
from webhooks.models import (
    EventReference,
    RejectedDelivery,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
    WebhookSecret,
)


class SecretForm(forms.ModelForm):
    """The secret is write-only: typed once, never rendered back (the field stays empty
    on edit, and an empty field keeps the stored secret)."""

    secret = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        help_text="Paste a new secret to set it. The stored one is never shown.",
    )

    class Meta:
        model = WebhookSecret
        fields = ["secret", "active"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.initial["secret"] = ""

    def clean_secret(self) -> str:
        value = self.cleaned_data.get("secret", "").strip()
        if not value:
            if self.instance.pk:
                return self.instance.secret
            raise forms.ValidationError("A new secret needs a value.")
        return value


class SecretInline(admin.TabularInline):
    model = WebhookSecret
    form = SecretForm
    extra = 1
    fields = ["masked", "secret", "active", "from_env", "created_at"]
    readonly_fields = ["masked", "from_env", "created_at"]

    @admin.display(description="secret (masked)")
    def masked(self, obj: WebhookSecret) -> str:
        return obj.masked if obj.pk else ""


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ["slug", "provider", "paused", "held_backlog", "active_secrets", to_the_second("created_at", "created")]
    list_filter = ["provider", "paused"]
    fields = ["slug", "provider", "description", "paused"]
    readonly_fields = ["paused"]  # changed only by the actions, which release held events
    inlines = [SecretInline]
    actions = ["pause_endpoints", "resume_endpoints"]

    @admin.display(description="held (oldest)")
    def held_backlog(self, obj: WebhookEndpoint) -> str:
        if not obj.paused:
            return "-"
        held = endpoints.backlog(obj)
        return f"{held.held} (since {held.oldest:%Y-%m-%d %H:%M:%S} UTC)" if held.oldest else "0"

    @admin.display(description="active secrets")
    def active_secrets(self, obj: WebhookEndpoint) -> str:
        return ", ".join(s.masked for s in obj.secrets.all() if s.active)

    @admin.action(description="Pause (store deliveries as held)")
    def pause_endpoints(self, request: HttpRequest, queryset: QuerySet) -> None:
        n = sum(endpoints.pause(e, actor=request.user.get_username(), user=request.user) for e in queryset)
        self.message_user(request, f"{n} endpoint(s) paused.")

    @admin.action(description="Resume (process held deliveries)")
    def resume_endpoints(self, request: HttpRequest, queryset: QuerySet) -> None:
        released = 0
        for endpoint in queryset:
            released += endpoints.resume(endpoint, actor=request.user.get_username(), user=request.user) or 0
        self.message_user(request, f"Resumed; {released} held event(s) released to processing.")


class AttemptInline(ReadOnlyInline):
    model = WebhookAttempt
    fields = ["number", "outcome", "started_at", "finished_at", "duration_ms", "error"]
    ordering = ["-id"]


class DeliveryInline(ReadOnlyInline):
    model = WebhookDelivery
    fields = ["received_at", "delivery_id", "duplicate", "payload_matches", "secret"]


class EventReferenceInline(ReferenceInline):
    model = EventReference


@admin.register(WebhookEvent)
class WebhookEventAdmin(SearchesReferences, FilterSafe, admin.ModelAdmin):
    list_display = [
        clipped("provider_event_id", "event id", width=28), "provider", clipped("event_type", "type", width=28), "status",
        "attempts", "delivery_count", to_the_second("received_at", "received"),
    ]
    list_filter = ["status", "provider", "payload_mismatch"]
    search_fields = ["dedupe_key", "provider_event_id", "event_type"]  # and a reference's exact value
    date_hierarchy = "received_at"
    inlines = [AttemptInline, DeliveryInline, EventReferenceInline]
    actions = ["reprocess", "release"]

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def _each(self, request: HttpRequest, queryset: QuerySet, action: OperatorAction, done: str) -> None:
        """Run one operator action (whose domain function writes the audit entry) on each selected
        event; an event it refuses is reported by its own warning and the rest go ahead."""
        count, refused = act_on_each(queryset, action, actor=request.user.get_username(), user=request.user)
        for event, exc in refused:
            self.message_user(request, f"Event {event.pk}: {exc}", level=messages.WARNING)
        self.message_user(request, done.format(count))

    @admin.action(description="Reprocess")
    def reprocess(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._each(request, queryset, operator_actions.REPROCESS, "{} event(s) queued for reprocessing.")

    @admin.action(description="Release (stuck: processing past its lease)")
    def release(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._each(request, queryset, operator_actions.RELEASE, "{} stuck event(s) released.")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(FilterSafe, admin.ModelAdmin):
    """Read-only: every delivery, first or redelivery, as the receiver stored it."""

    list_display = [to_the_second("received_at", "received"), "event", "duplicate", "payload_matches"]
    list_filter = ["duplicate", "payload_matches", "event__provider"]
    search_fields = ["delivery_id", "event__provider_event_id", "event__dedupe_key"]
    date_hierarchy = "received_at"
    list_select_related = ["event"]
    fields = ["event", "received_at", "delivery_id", "duplicate", "payload_matches"]  # never the secret, even masked
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(RejectedDelivery)
class RejectedDeliveryAdmin(FilterSafe, admin.ModelAdmin):
    list_display = [to_the_second("received_at", "received"), "provider", "endpoint", "cause", "body_size", "remote_addr"]
    list_filter = ["cause", "provider"]
    search_fields = ["detail", "remote_addr"]
    date_hierarchy = "received_at"

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
