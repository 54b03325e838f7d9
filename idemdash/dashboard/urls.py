from django.urls import path

from idemdash.dashboard import alert_views, bulk, views, views_flow

app_name = "dashboard"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("receipts/", views.receipts, name="receipts"),
    path("receipts/bulk-release/", bulk.bulk_action, {"kind": "receipts"}, name="receipts_bulk"),
    path("receipts/<int:pk>/", views.receipt_detail, name="receipt"),
    path("receipts/<int:pk>/release/", views.receipt_action, {"action": "release"}, name="receipt_release"),
    path("stuck/", views.stuck, name="stuck"),
    path("events/", views_flow.events, name="events"),
    path("events/bulk-reprocess/", bulk.bulk_action, {"kind": "events"}, name="events_bulk"),
    path("events/<int:pk>/", views_flow.event_detail, name="event"),
    path("events/<int:pk>/reprocess/", views_flow.event_action, {"action": "reprocess"}, name="event_reprocess"),
    path("events/<int:pk>/release/", views_flow.event_action, {"action": "release"}, name="event_release"),
    path("rejected/", views_flow.rejected, name="rejected"),
    path("outbox/", views_flow.outbox, name="outbox"),
    path("outbox/bulk-send-again/", bulk.bulk_action, {"kind": "outbox"}, name="outbox_bulk"),
    path("outbox/<int:pk>/", views_flow.message_detail, name="message"),
    path("outbox/<int:pk>/send-now/", views_flow.message_action, {"action": "send_now"}, name="message_send_now"),
    path("outbox/<int:pk>/send-again/", views_flow.message_action, {"action": "send_again"}, name="message_send_again"),
    path("outbox/<int:pk>/release/", views_flow.message_action, {"action": "release"}, name="message_release"),
    path("audit/", views.audit_log, name="audit"),
    path("api/v1/stats", views.api_stats, name="api_stats"),
    path("metrics", views.metrics, name="metrics"),
]

# The old paths of actions since named by their verb (docs/architecture.md, section 8), kept
# for bookmarks and open pages for one release: each serves its action under its new path.
urlpatterns += [
    path("receipts/bulk-retry/", bulk.bulk_action, {"kind": "receipts"}, name="bulk_retry"),
    path("receipts/<int:pk>/retry/", views.receipt_action, {"action": "release"}, name="receipt_retry"),
    path("outbox/bulk-requeue/", bulk.bulk_action, {"kind": "outbox"}),
    path("outbox/<int:pk>/retry/", views_flow.message_action, {"action": "send_now"}, name="message_retry"),
    path("outbox/<int:pk>/requeue/", views_flow.message_action, {"action": "send_again"}, name="message_requeue"),
]

# Alerts (idemdash.dashboard.alerts): history for viewers, rules for operators.
urlpatterns += [
    path("alerts/", alert_views.alert_history, name="alerts"),
    path("alerts/rules/", alert_views.alert_rules, name="alert_rules"),
    path("alerts/rules/new/", alert_views.alert_rule_edit, name="alert_rule_new"),
    path("alerts/rules/<int:pk>/", alert_views.alert_rule_edit, name="alert_rule"),
    path("alerts/rules/<int:pk>/delete/", alert_views.alert_rule_delete, name="alert_rule_delete"),
    path("alerts/rules/<int:pk>/evaluate/", alert_views.alert_rule_evaluate, name="alert_rule_evaluate"),
]
