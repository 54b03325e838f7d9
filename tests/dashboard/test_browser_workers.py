"""The overview's Workers section in a real browser (Chromium through Playwright): one
cluster taking work, one that stopped taking work, one stopped. The screenshot
(var/screenshots/overview-workers.png) is for a human to look at."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from idemdash.worker.models import ClusterHeartbeat
from tests.dashboard.test_browser import SHOTS, browser, operator, operator_page  # noqa: F401 -- fixtures

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def clusters() -> None:
    now = timezone.now()
    for name, host, took, stopped, restarts in [
        ("alpha-bravo-charlie", "worker-1", now - timedelta(seconds=3), None, 0),
        ("delta-echo-foxtrot", "worker-2", now - timedelta(minutes=39), None, 2),
        ("golf-hotel-india", "worker-1", now - timedelta(hours=3), now - timedelta(hours=3), 0),
    ]:
        ClusterHeartbeat.objects.create(cluster_id=uuid.uuid4(), name=name, host=host, pid=4242, queue="idemdash",
                                        started_at=now - timedelta(hours=5), took_work_at=took, stopped_at=stopped,
                                        restarts=restarts)


def test_the_overview_shows_each_cluster_and_when_it_last_took_work(clusters, operator_page, live_server):
    page = operator_page
    page.goto(live_server.url + "/")
    section = page.locator("#clusters")
    section.scroll_into_view_if_needed()
    states = {row.get_attribute("data-cluster"): row.get_attribute("data-state")
              for row in section.locator("tr[data-cluster]").all()}
    assert states == {"alpha-bravo-charlie": "taking work", "delta-echo-foxtrot": "not taking work",
                      "golf-hotel-india": "stopped"}
    assert "39 min ago" in section.locator('tr[data-cluster="delta-echo-foxtrot"]').inner_text()
    section.screenshot(path=SHOTS / "overview-workers.png")
