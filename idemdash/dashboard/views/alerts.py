"""Alert pages: the history (viewers), and rules that operators create, edit, delete and
evaluate. Every change goes through idemdash.dashboard.alerts, which writes the audit log."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from idemdash.dashboard import alerts
from idemdash.dashboard.access import operator_required, viewer_required
from idemdash.dashboard.forms import AlertFilter, AlertRuleForm
from idemdash.dashboard.views.pages import newest_first_list, safe_next
from idemdash.dashboard.models import Alert, AlertRule

@require_GET
@viewer_required
def alert_history(request: HttpRequest) -> HttpResponse:
    return newest_first_list(request, AlertFilter(request.GET), "dashboard/alerts.html",
                             "dashboard/partials/alert_table.html", decorate=alerts.attach_notifications)


@require_GET
@viewer_required
def alert_rules(request: HttpRequest) -> HttpResponse:
    firing = {a.rule_id: a for a in Alert.objects.filter(state=Alert.State.FIRING, rule__isnull=False)}
    rules = list(AlertRule.objects.all())
    for rule in rules:
        rule.firing_alert = firing.get(rule.pk)
    emails = any(rule.enabled and rule.channel == AlertRule.Channel.EMAIL for rule in rules)
    return render(request, "dashboard/alert_rules.html",
                  {"rules": rules, "undelivered_mail": alerts.undelivered_mail() if emails else ""})


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


@require_http_methods(["GET", "POST"])
@operator_required
def alert_rule_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    rule = get_object_or_404(AlertRule, pk=pk) if pk is not None else AlertRule()
    before = "" if pk is None else ("enabled" if rule.enabled else "disabled")
    form = AlertRuleForm(request.POST if request.method == "POST" else None, instance=rule)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            alerts.save_rule(form.instance, actor=_actor(request), user=request.user, before=before)
            messages.success(request, f"Rule {rule.name!r} {'created' if pk is None else 'saved'}: "
                                      f"{rule.condition}. It is evaluated every minute.")
            return redirect("dashboard:alert_rules")
        status = 400
    return render(request, "dashboard/alert_rule_form.html",
                  {"form": form, "rule": rule, "undelivered_mail": alerts.undelivered_mail()}, status=status)


@require_http_methods(["GET", "POST"])
@operator_required
def alert_rule_delete(request: HttpRequest, pk: int) -> HttpResponse:
    rule = get_object_or_404(AlertRule, pk=pk)
    if request.method == "POST":
        name = rule.name
        alerts.delete_rule(rule, actor=_actor(request), user=request.user)
        messages.success(request, f"Rule {name!r} deleted; its alerts stay in the history.")
        return redirect("dashboard:alert_rules")
    firing = Alert.objects.filter(rule=rule, state=Alert.State.FIRING).first()
    return render(request, "dashboard/alert_rule_delete.html", {"rule": rule, "firing": firing})


@require_POST
@operator_required
def alert_rule_evaluate(request: HttpRequest, pk: int) -> HttpResponse:
    rule = get_object_or_404(AlertRule, pk=pk)
    result = alerts.evaluate_rule(rule, actor=_actor(request), user=request.user)
    if not rule.enabled:
        messages.info(request, f"{rule.name} is disabled: not measured.")
    else:
        value = alerts.format_value(rule.metric, result.values[rule.name])
        if result.fired:
            messages.error(request, f"{rule.name} fired: the figure is {value}. Its notification is in the outbox.")
        elif result.still_firing:
            messages.warning(request, f"{rule.name} is still firing: the figure is {value}.")
        elif result.resolved:
            messages.success(request, f"{rule.name} resolved: the figure is {value}.")
        else:
            messages.success(request, f"{rule.name} is quiet: the figure is {value}.")
    return redirect(safe_next(request, reverse("dashboard:alert_rules")))
