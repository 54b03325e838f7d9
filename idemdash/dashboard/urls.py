"""The dashboard's pages, kind by kind: each kind's list, bulk action, unit page and actions.

An action on one unit is `views.actions.object_action` with the registry's kind and action
(idemdash/core/actions.py), under the URL name `<kind>_<action>`; a bulk action is
`views.bulk.bulk_action` with the list it is offered under (`views.bulk.BULK`).
"""

from django.urls import URLPattern, path

from idemdash.dashboard.views import (
    alerts, audit, bulk, coverage, events, incidents, machine, outbox, overview, pauses, receipts, search, stuck,
)
from idemdash.dashboard.views.actions import object_action


def _action(route: str, kind: str, action: str) -> URLPattern:
    return path(route, object_action, {"kind": kind, "action": action}, name=f"{kind}_{action}")


def _bulk(route: str, listed: str, name: str) -> URLPattern:
    return path(route, bulk.bulk_action, {"kind": listed}, name=name)


app_name = "dashboard"
urlpatterns = [
    path("", overview.overview, name="overview"),
    path("stuck/", stuck.stuck, name="stuck"),
    # Receipts
    path("receipts/", receipts.receipts, name="receipts"),
    _bulk("receipts/bulk-release/", "receipts", "receipts_bulk"),
    path("receipts/<int:pk>/", receipts.receipt_detail, name="receipt"),
    _action("receipts/<int:pk>/release/", "receipt", "release"),
    _action("receipts/<int:pk>/mark-completed/", "receipt", "mark_completed"),
    _action("receipts/<int:pk>/run-again/", "receipt", "run_again"),
    # Webhook events and rejected deliveries
    path("events/", events.events, name="events"),
    _bulk("events/bulk-reprocess/", "events", "events_bulk"),
    path("events/<int:pk>/", events.event_detail, name="event"),
    _action("events/<int:pk>/reprocess/", "event", "reprocess"),
    _action("events/<int:pk>/release/", "event", "release"),
    path("rejected/", events.rejected, name="rejected"),
    # Outbox messages
    path("outbox/", outbox.outbox, name="outbox"),
    _bulk("outbox/bulk-send-again/", "outbox", "outbox_bulk"),
    path("outbox/<int:pk>/", outbox.message_detail, name="message"),
    _action("outbox/<int:pk>/send-now/", "message", "send_now"),
    _action("outbox/<int:pk>/send-again/", "message", "send_again"),
    _action("outbox/<int:pk>/release/", "message", "release"),
    # Pausing: outbox sending (an action or a host) and webhook endpoints' processing
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
