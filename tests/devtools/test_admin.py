"""The DemoSwitch admin of the devtools app: its actions are the demo's fix, audited."""

from __future__ import annotations

import pytest

from idemdash.devtools.models import DemoSwitch
from idemdash.devtools import demo
from idemdash.core.models import AuditEntry

pytestmark = pytest.mark.django_db


def test_the_demo_switch_is_fixed_and_broken_again_by_admin_actions_that_are_audited(admin_client):
    demo.setup()
    switch = DemoSwitch.objects.get()
    assert admin_client.get("/admin/devtools/demoswitch/add/").status_code == 403  # only demo_stage makes them

    response = admin_client.post("/admin/devtools/demoswitch/", {"action": "fix", "_selected_action": [switch.pk]}, follow=True)
    assert "Refunds fixed: its handler succeeds now" in response.content.decode()
    assert not demo.failing(demo.REFUNDS)
    admin_client.post("/admin/devtools/demoswitch/", {"action": "break_again", "_selected_action": [switch.pk]})
    assert demo.failing(demo.REFUNDS)
    assert list(AuditEntry.objects.filter(action__startswith="demo_switch.").order_by("id").values_list("action", "actor")) == [
        ("demo_switch.fix", "admin"), ("demo_switch.break", "admin"),
    ]
