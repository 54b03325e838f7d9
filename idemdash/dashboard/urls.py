"""The dashboard's pages, kind by kind: each kind's list, bulk action, unit page and actions.

An action on one unit is `views.actions.object_action` with the registry's kind and action
(idemdash/core/actions.py), under the URL name `<kind>_<action>`; a bulk action is
`views.bulk.bulk_action` with the list it is offered under (`views.bulk.BULK`)."""

from typing import Any

from django.urls import URLPattern, path

from idemdash.dashboard.views import (
    alerts, audit, bulk, coverage, events, failures, incidents, machine, outbox, overview, pauses, receipts, search, stuck,
)
from idemdash.dashboard.views.actions import object_action


def _action(route: str, kind: str, action: str) -> URLPattern:
    return path(route, object_action, {"kind": kind, "action": action}, name=f"{kind}_{action}")


def _kind(listed: str, kind: str, listing: Any, page: Any, bulk_route: str, actions: list[str]) -> list[URLPattern]:
    """A kind's list (`listed`, the URL's first part), its bulk action, a unit's page and its
    actions, each under the action's name with dashes."""
    return [
        path(f"{listed}/", listing, name=listed),
        path(f"{listed}/{bulk_route}/", bulk.bulk_action, {"kind": listed}, name=f"{listed}_bulk"),
        path(f"{listed}/<int:pk>/", page, name=kind),
        *(_action(f"{listed}/<int:pk>/{action.replace('_', '-')}/", kind, action) for action in actions),
    ]


app_name = "dashboard"
urlpatterns = [
    path("", overview.overview, name="overview"),
    path("stuck/", stuck.stuck, name="stuck"),
    *_kind("receipts", "receipt", receipts.receipts, receipts.receipt_detail, "bulk-release",
           ["release", "mark_completed", "run_again"]),
    *_kind("events", "event", events.events, events.event_detail, "bulk-reprocess", ["reprocess", "release"]),
    path("rejected/", events.rejected, name="rejected"),
    *_kind("outbox", "message", outbox.outbox, outbox.message_detail, "bulk-send-again",
           ["send_now", "send_again", "release"]),
    # Pausing: outbox sending (an action or a host) and webhook endpoints' processing
    path("failures/", failures.failure_groups, name="failures"),
    path("failures/<int:pk>/acknowledge/", failures.acknowledge, name="failure_acknowledge"),
    path("failures/<int:pk>/resolve/", failures.resolve, name="failure_resolve"),
    path("paused/", pauses.paused, name="paused"),
    path("paused/outbox/pause/", pauses.outbox_pause, name="outbox_pause"),
    path("paused/outbox/resume/", pauses.outbox_resume, name="outbox_resume"),
    path("paused/endpoints/<int:pk>/pause/", pauses.endpoint_pause, name="endpoint_pause"),
    path("paused/endpoints/<int:pk>/resume/", pauses.endpoint_resume, name="endpoint_resume"),
    # What every kind shares
    path("audit/", audit.audit_log, name="audit"),
    path("coverage/", coverage.coverage, name="coverage"),
    path("search/", search.search, name="search"),
    path("trace/", search.trace, name="trace"),
    path("bulk/<int:pk>/", bulk.bulk_run, name="bulk_run"),
    path("bulk/<int:pk>/cancel/", bulk.bulk_run_cancel, name="bulk_run_cancel"),
    path("api/v1/stats", machine.api_stats, name="api_stats"),
    path("metrics", machine.metrics, name="metrics"),
    # Alerts (idemdash.dashboard.alerts): history for viewers, rules for operators.
    path("alerts/", alerts.alert_history, name="alerts"),
    path("alerts/rules/", alerts.alert_rules, name="alert_rules"),
    path("alerts/rules/new/", alerts.alert_rule_edit, name="alert_rule_new"),
    path("alerts/rules/<int:pk>/", alerts.alert_rule_edit, name="alert_rule"),
    path("alerts/rules/<int:pk>/delete/", alerts.alert_rule_delete, name="alert_rule_delete"),
    path("alerts/rules/<int:pk>/evaluate/", alerts.alert_rule_evaluate, name="alert_rule_evaluate"),
    # Incidents (idemdash.dashboard.incidents): one per alert; viewers read, operators acknowledge.
    path("incidents/", incidents.incident_list, name="incidents"),
    path("incidents/<int:pk>/", incidents.incident_detail, name="incident"),
    path("incidents/<int:pk>/acknowledge/", incidents.incident_acknowledge, name="incident_acknowledge"),
]
