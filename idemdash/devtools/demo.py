"""`make demo`'s staged outages and its alert rule, so that a first run has something to repair.

- The Shopify `refunds/create` handler (idemdash.devtools.webhook_handlers) fails while the
  `refunds` switch is on: its events retry, then go dead. An operator fixes the "bug" by
  turning the switch off (admin: Demo switches, action "Fix"), then reprocesses the dead
  events, which complete.
- The alert rule `DEMO_RULE` fires on those dead events and resolves once they are
  reprocessed.

The simulator stages the other two (a partner that refuses one path for a while, agents
that crash holding long leases); they need nothing in the database.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from idemdash.core import audit
from idemdash.dashboard import alerts
from idemdash.dashboard.models import AlertRule
from idemdash.devtools.models import DemoSwitch

REFUNDS = "refunds"

SWITCHES = {
    REFUNDS: "Shopify refunds/create: the demo handler fails while this is on (a staged bug). "
             "Turn it off, then reprocess the dead events.",
}

DEMO_RULE = {
    "name": "Demo: dead webhook events",
    "metric": AlertRule.Metric.DEAD_WEBHOOK_EVENTS,
    "comparison": AlertRule.Comparison.GT,
    "threshold": 0,
    "window_minutes": 60,
    "channel": AlertRule.Channel.EMAIL,
    "target": "admin@localhost",
}

ACTOR = "demo_setup"


class DemoOutage(RuntimeError):
    """Raised by a demo handler while its switch is on."""


def failing(name: str) -> bool:
    """Whether the demo outage `name` is on. No row (the demo was never set up): off."""
    return DemoSwitch.objects.filter(name=name, failing=True).exists()


def check(name: str) -> None:
    if failing(name):
        raise DemoOutage(
            f"demo outage {name!r}: {SWITCHES[name]} "
            "(admin: /admin/devtools/demoswitch/, select it, action \"Fix\")"
        )


def set_failing(switch: DemoSwitch, on: bool, *, actor: str, user: Any = None) -> bool:
    """Turn a switch on or off, recorded in the audit log; False if it already was."""
    before, after = ("fixed", "failing") if on else ("failing", "fixed")
    with transaction.atomic():
        # Conditional, so that two flips at once record one change; update() skips auto_now.
        changed = DemoSwitch.objects.filter(pk=switch.pk, failing=not on).update(failing=on, updated_at=timezone.now())
        if changed != 1:
            return False
        audit.record(actor, "demo_switch.break" if on else "demo_switch.fix", switch,
                     status_before=before, status_after=after, user=user)
    switch.refresh_from_db()
    return True


def setup() -> tuple[list[str], bool]:
    """Arm every demo outage (each `make demo` starts broken) and install the demo's alert
    rule once: an operator's edits to the rule are kept. Returns the switches armed now and
    whether the rule was created."""
    armed = []
    for name, description in SWITCHES.items():
        switch, created = DemoSwitch.objects.get_or_create(name=name, defaults={"description": description})
        if created:
            armed.append(name)
        elif set_failing(switch, True, actor=ACTOR):
            armed.append(name)
    created = False
    if not AlertRule.objects.filter(name=DEMO_RULE["name"]).exists():
        rule = AlertRule(**DEMO_RULE)
        rule.full_clean()
        try:
            alerts.save_rule(rule, actor=ACTOR)
            created = True
        except IntegrityError:
            # Two setups at once: the unique name let one insert win.
            if not AlertRule.objects.filter(name=DEMO_RULE["name"]).exists():
                raise
    return armed, created
