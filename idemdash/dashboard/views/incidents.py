"""Incident pages: the list and one incident with its history (viewers), and acknowledging
(operators). The move is idemdash.dashboard.incidents.acknowledge, which writes the audit log."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from idemdash.dashboard import alerts, incidents
from idemdash.dashboard.access import operator_required, viewer_required
from idemdash.dashboard.forms import AcknowledgeForm, IncidentFilter
from idemdash.dashboard.models import Incident
from idemdash.dashboard.views.pages import newest_first_list
from receipts.outbox.models import OutboxMessage

@require_GET
@viewer_required
def incident_list(request: HttpRequest) -> HttpResponse:
    return newest_first_list(request, IncidentFilter(request.GET), "dashboard/incidents.html",
                             "dashboard/partials/incident_table.html")


def _detail(request: HttpRequest, incident: Incident, form: AcknowledgeForm, status: int = 200) -> HttpResponse:
    alert = incident.alert
    history = list(incident.history.all())
    keys = [e.notification_key for e in history if e.notification_key]
    sent = {m.key: m for m in OutboxMessage.objects.filter(key__in=keys)} if keys else {}
    for e in history:
        e.message = sent.get(e.notification_key)
    context = {
        "incident": incident,
        "alert": alert,
        "history": history,
        "cause": alerts.cause_path(alert.metric, alert.rule.window_minutes if alert.rule else None),
        "form": form,
    }
    return render(request, "dashboard/incident_detail.html", context, status=status)


@require_GET
@viewer_required
def incident_detail(request: HttpRequest, pk: int) -> HttpResponse:
    incident = get_object_or_404(Incident.objects.select_related("alert", "alert__rule"), pk=pk)
    return _detail(request, incident, AcknowledgeForm())


@require_POST
@operator_required
def incident_acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    incident = get_object_or_404(Incident.objects.select_related("alert", "alert__rule"), pk=pk)
    form = AcknowledgeForm(request.POST)
    if not form.is_valid():
        return _detail(request, incident, form, status=400)
    outcome = incidents.acknowledge(incident, actor=request.user.get_username(), note=form.cleaned_data["note"],
                                    user=request.user)
    if outcome == incidents.ACKNOWLEDGED:
        messages.success(request, "Acknowledged: no more reminders will be sent; you will still be told when it recovers.")
    elif outcome == incidents.ALREADY_ACKNOWLEDGED:
        messages.info(request, f"Already acknowledged by {incident.acknowledged_by}; nothing changed.")
    else:
        messages.info(request, "It resolved before your acknowledgement; nothing changed.")
    return redirect("dashboard:incident", pk=incident.pk)
