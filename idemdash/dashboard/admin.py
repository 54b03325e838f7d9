"""Admin for alert rules, their alerts and incidents. Saving or deleting a rule here goes
through idemdash.dashboard.alerts, like the dashboard, so it is audited; alerts and incidents
are read-only but for deleting (the evaluator moves them, and operators acknowledge on the
dashboard's incident page, where the form is CSRF-protected and audited)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from idemdash.core.columns import ReadOnlyAdmin, ReadOnlyInline, to_the_second
from idemdash.dashboard import alerts
from idemdash.dashboard.models import Alert, AlertRule, Incident, IncidentEvent

# The app list beside every page took 300 of 1440 px from the changelists, whose last columns
# were then cut off; the admin index and the breadcrumbs lead to the same pages.
admin.site.enable_nav_sidebar = False


def _actor(request: HttpRequest) -> str:
    # The username, as every front end records it (docs/architecture.md, section 8).
    return request.user.get_username()


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ("name", "metric", "comparison", "threshold_shown", "window_minutes", "channel", "target_display", "enabled")
    list_filter = ("enabled", "metric", "channel")
    search_fields = ("name",)
    readonly_fields = ("created_by", "created_at", "updated_at")
    actions = ["evaluate_selected"]

    @admin.display(description="threshold", ordering="threshold")
    def threshold_shown(self, obj: AlertRule) -> str:
        return obj.threshold_display  # "20%" for a rate, as the dashboard shows it

    def save_model(self, request: HttpRequest, obj: AlertRule, form: Any, change: bool) -> None:
        before = ""
        if change:
            before = "enabled" if AlertRule.objects.get(pk=obj.pk).enabled else "disabled"
        alerts.save_rule(obj, actor=_actor(request), user=request.user, before=before)

    def delete_model(self, request: HttpRequest, obj: AlertRule) -> None:
        alerts.delete_rule(obj, actor=_actor(request), user=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for rule in queryset:
            alerts.delete_rule(rule, actor=_actor(request), user=request.user)

    @admin.action(description="Evaluate selected rules now", permissions=["change"])
    def evaluate_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        fired = resolved = 0
        for rule in queryset:
            result = alerts.evaluate_rule(rule, actor=_actor(request), user=request.user)
            fired += len(result.fired)
            resolved += len(result.resolved)
        self.message_user(request, f"Evaluated {queryset.count()} rule(s): {fired} fired, {resolved} resolved.")


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = ("rule_name", "state", "condition", "value", to_the_second("fired_at", "fired"),
                    to_the_second("resolved_at", "resolved"))
    list_filter = ("state", "metric")
    search_fields = ("rule_name",)
    date_hierarchy = "fired_at"
    readonly_fields = [f.name for f in Alert._meta.fields]
    has_delete_permission = admin.ModelAdmin.has_delete_permission


class IncidentEventInline(ReadOnlyInline):
    model = IncidentEvent
    fields = ["at", "kind", "actor", "detail", "notification_key"]


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAdmin):
    list_display = ("pk", "rule_name", "state", to_the_second("opened_at", "opened"), "acknowledged_by",
                    to_the_second("resolved_at", "resolved"), "evaluations", "reminders_sent")
    list_filter = ("state",)
    search_fields = ("alert__rule_name", "acknowledged_by", "note")
    date_hierarchy = "opened_at"
    readonly_fields = [f.name for f in Incident._meta.fields]
    inlines = [IncidentEventInline]
    has_delete_permission = admin.ModelAdmin.has_delete_permission

    @admin.display(description="rule", ordering="alert__rule_name")
    def rule_name(self, obj: Incident) -> str:
        return obj.alert.rule_name

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("alert")
