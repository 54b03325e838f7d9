from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from idemdash.dashboard.forms import ListFilter
from idemdash.dashboard.alert_rules import PERCENT_METRICS, parse_window_minutes, window_label
from idemdash.dashboard.models import Alert, AlertRule, Incident


class AlertRuleForm(forms.ModelForm):
    """A rule as operators type it. The target is checked by AlertRule.clean, which the
    admin's form calls too."""

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

    def clean_threshold(self) -> float:
        threshold = self.cleaned_data["threshold"]
        if threshold < 0:
            raise ValidationError("Every figure is 0 or more; give a threshold of 0 or more.")
        return threshold

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
