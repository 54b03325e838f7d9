"""Ground truth: known traffic must give exactly the hand-counted figures on
/api/v1/stats, on the overview tiles and on /metrics. Receipts traffic is
tests.dashboard.build.known_traffic (through receipts.store); webhook and outbox traffic is
tests.dashboard.flow_traffic.known_flow_traffic (through POST /webhooks/<slug>/,
POST /api/v1/outbox, the worker's process_event and the drain)."""

from __future__ import annotations

import html as html_lib
import re
from datetime import datetime, timedelta, timezone

import pytest
import time_machine
from prometheus_client.parser import text_string_to_metric_families

from idemdash.core import rollup
from idemdash.core.clients import create_token
from receipts.models import AttemptHourly, ObservedRequest, Receipt
from tests.dashboard.build import EXPECTED_STATS, known_traffic
from tests.dashboard.flow_traffic import EXPECTED_FLOW, FAILING_TYPE, known_flow_traffic, outbox_receiver_policy
from tests.receipts.outbox.receiver import running_receiver
from webhooks import handlers
from webhooks.models import DeliveryHourly

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 2, 30, tzinfo=timezone.utc)
WINDOWS = ["1h", "24h", "7d", "30d"]


# The observer's notes of write requests to unprotected routes (receipts/observe.py), by
# minutes before NOW and fingerprint: a repeat within its 10-minute window is a would-be duplicate.
NOTES = [(10, "r1"), (9, "r1"), (8, "r2"), (180, "r3"), (178, "r3"), (30 * 60, "r4")]
EXPECTED_UNPROTECTED = {
    "1h": {"requests": 3, "duplicates": 1, "duplicate_rate": 0.3333},
    "24h": {"requests": 5, "duplicates": 2, "duplicate_rate": 0.4},
    "7d": {"requests": 6, "duplicates": 2, "duplicate_rate": 0.3333},
    "30d": {"requests": 6, "duplicates": 2, "duplicate_rate": 0.3333},
}


def noted_traffic(now: datetime) -> None:
    ObservedRequest.objects.bulk_create(
        ObservedRequest(method="POST", route="shop/refunds/", caller="anonymous", fingerprint=fp,
                        at=now - timedelta(minutes=minutes))
        for minutes, fp in NOTES)


# Completed receipts of one caller's one request under new keys (minutes before NOW): a second
# key within the 10-minute window is a fresh-key retry that ran again. Receipts alone, with no
# attempt lines, so the claim figures stay the known traffic's.
FRESH_KEYS = [(10, "fk-1"), (9, "fk-2"), (180, "fk-3"), (178, "fk-4"), (40 * 60, "fk-5")]
EXPECTED_FRESH_KEYS = {
    "1h": {"retries": 1, "ran_again": 1, "refused": 0},
    "24h": {"retries": 2, "ran_again": 2, "refused": 0},
    "7d": {"retries": 2, "ran_again": 2, "refused": 0},
    "30d": {"retries": 2, "ran_again": 2, "refused": 0},
}


def fresh_key_traffic(now: datetime) -> None:
    Receipt.objects.bulk_create(
        Receipt(scope="client:retrier", key=key, operation="refund.create", fingerprint="f" * 64, status="completed",
                created_at=now - timedelta(minutes=minutes), updated_at=now - timedelta(minutes=minutes),
                completed_at=now - timedelta(minutes=minutes), response_status=201)
        for minutes, key in FRESH_KEYS)


@pytest.fixture(params=["log only", "rolled up"])
def traffic(request, settings, outbox_may_post_locally):
    settings.WEBHOOKS_MAX_ATTEMPTS = 1  # a failing handler's event dies on its first attempt
    settings.OUTBOX_BACKOFF_BASE_SECONDS = settings.OUTBOX_BACKOFF_CAP_SECONDS = 10**7  # a retry waits for months
    settings.STRIPE_WEBHOOK_SECRET = ""
    known_traffic(NOW)
    noted_traffic(NOW)
    fresh_key_traffic(NOW)
    try:
        with running_receiver(outbox_receiver_policy) as receiver:
            known_flow_traffic(NOW, receiver.url)
    finally:
        handlers.unregister("stripe", FAILING_TYPE)
    if request.param == "rolled up":
        # Caught up to 12:00; every window starts mid-hour (NOW is 12:02:30), so each
        # reads its first partial hour and the last two minutes from the log.
        rollup.catch_up(NOW)
        assert AttemptHourly.objects.exists() and DeliveryHourly.objects.exists()
    with time_machine.travel(NOW, tick=False):
        yield


def expected_document(window: str) -> dict:
    return {"window": window, "receipts": EXPECTED_STATS[window], **EXPECTED_FLOW[window],
            "unprotected": EXPECTED_UNPROTECTED[window], "fresh_keys": EXPECTED_FRESH_KEYS[window]}


# Each window is read from the same traffic in one test: building it is most of a test's time.
def test_the_json_figures_equal_the_known_traffic(traffic, viewer_client):
    for window in WINDOWS:
        response = viewer_client.get(f"/api/v1/stats?window={window}")
        assert response.status_code == 200
        assert response.json() == expected_document(window), window


def tiles(html: str) -> dict[str, str]:
    """Every figure the overview shows, by `block.field`: a tile's value (its raw
    data-value when the text is formatted), or an inline figure in a tile's note."""
    found = re.findall(r'class="tile[^"]*" data-figure="(\w+\.\w+)"[^>]*>.*?class="tile-value"(?: data-value="([^"]*)")?>([^<]*)<', html, re.S)
    shown = {name: (raw or text) for name, raw, text in found}
    inline = re.findall(r'<span data-figure="(\w+\.\w+)">([^<]*)</span>', html)
    assert not set(shown) & {name for name, _ in inline}
    return {**shown, **dict(inline)}


def test_the_overview_tiles_show_the_same_figures(traffic, viewer_client):
    for window in WINDOWS:
        assert_tiles_show_the_figures(viewer_client, window)


def assert_tiles_show_the_figures(viewer_client, window: str) -> None:
    html = html_lib.unescape(viewer_client.get(f"/?window={window}").content.decode())
    document = expected_document(window)
    shown = tiles(html)
    receipts_shown = {"requests", "duplicate_rate", "concurrent_duplicates", "waited", "mismatch_conflicts",
                      "failed", "stuck"}
    assert set(shown) == {f"receipts.{n}" for n in receipts_shown} | {
        f"{block}.{field}" for block in ("webhooks", "outbox") for field in document[block]
    } | {"unprotected.duplicates", "unprotected.requests", "fresh_keys.ran_again", "fresh_keys.refused"}
    for name, value in shown.items():
        block, field = name.split(".")
        assert float(value) == document[block][field], (window, name)
    expected = EXPECTED_STATS[window]
    assert f"{expected['claimed']} ran · {expected['replayed']} replayed" in html
    pct = f"{expected['duplicate_rate'] * 100:.2f}".rstrip("0").rstrip(".") + "%"
    assert f">{pct}<" in html
    unprotected = EXPECTED_UNPROTECTED[window]
    share = f"{unprotected['duplicate_rate'] * 100:.2f}".rstrip("0").rstrip(".") + "%"
    assert f'{share} of <span data-figure="unprotected.requests">{unprotected["requests"]}</span> write requests' in html


def test_metrics_agree_with_the_figures_of_a_window_that_holds_all_the_traffic(traffic, viewer_client):
    response = viewer_client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }

    def total(name: str, **labels: str) -> float:
        return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))

    # The counters count everything ever: the 30-day window's figures and the traffic of forty
    # days ago, outside every window (one claim that failed, one first delivery, one message
    # enqueued and sent: tests/dashboard/build.py and flow_traffic.py).
    document = expected_document("30d")
    receipts, webhooks, outbox = document["receipts"], document["webhooks"], document["outbox"]
    assert total("idemdash_receipt_claims_total") == receipts["requests"] + 1
    assert total("idemdash_receipt_claims_total", outcome="claimed") == receipts["claimed"] + 1 - (
        total("idemdash_receipt_claims_total", outcome="retried_after_failure")
        + total("idemdash_receipt_claims_total", outcome="lease_takeover")
    )
    assert total("idemdash_receipt_claims_total", outcome="replayed") == receipts["replayed"]
    assert total("idemdash_receipt_claims_total", outcome="waited") == receipts["waited"]
    assert (total("idemdash_receipt_claims_total", outcome="in_progress") + receipts["waited"]
            == receipts["concurrent_duplicates"])
    assert total("idemdash_receipt_claims_total", outcome="mismatch") == receipts["mismatch_conflicts"]
    assert total("idemdash_webhook_deliveries_total") == webhooks["deliveries"] + 1
    assert total("idemdash_webhook_deliveries_total", kind="first") == webhooks["events"] + 1
    assert total("idemdash_webhook_deliveries_total", kind="redelivery") == webhooks["duplicates"]
    assert total("idemdash_webhook_deliveries_total", kind="redelivery", payload_matches="false") == (
        webhooks["payload_mismatches"]
    )
    assert total("idemdash_outbox_messages_enqueued_total") == outbox["enqueued"] + 1
    assert total("idemdash_outbox_attempts_total", outcome="sent") == outbox["sent"] + 1
    # The gauges are the state right now, in every window alike.
    assert total("idemdash_receipts_stuck") == receipts["stuck"]
    assert total("idemdash_webhook_events_stuck") == webhooks["stuck"]
    assert total("idemdash_outbox_messages_pending") == outbox["pending"]
    assert total("idemdash_outbox_messages_stuck") == outbox["stuck"]
    assert int(total("idemdash_outbox_oldest_pending_age_seconds")) == outbox["oldest_pending_age_seconds"]
    # Every dead event and message died within 30 days; the failed claim of forty days ago is
    # failed still.
    assert total("idemdash_webhook_events_dead") == webhooks["dead"]
    assert total("idemdash_outbox_messages_dead") == outbox["dead"]
    assert total("idemdash_receipts_failed") == receipts["failed"] + 1
    # The observer's notes, every one ever (all within 30 days), by kind.
    assert total("idemdash_unprotected_requests_total") == EXPECTED_UNPROTECTED["30d"]["requests"]
    assert total("idemdash_unprotected_requests_total", kind="duplicate") == EXPECTED_UNPROTECTED["30d"]["duplicates"]


def test_an_api_token_may_read_the_json_and_the_metrics(traffic, client):
    _, token = create_token("grafana")
    auth = {"Authorization": f"Bearer {token}"}
    assert client.get("/api/v1/stats?window=1h", headers=auth).json() == expected_document("1h")
    assert client.get("/metrics", headers=auth).status_code == 200


@pytest.mark.parametrize("url", ["/api/v1/stats", "/metrics"])
def test_without_a_session_or_token_it_is_a_401_problem(client, url):
    response = client.get(url, headers={"Authorization": "Bearer idem_wrong"})
    assert response.status_code == 401
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["type"] == "urn:idemdash:problem:unauthorized"


@pytest.mark.parametrize("url", ["/api/v1/stats", "/metrics"])
def test_a_session_without_the_view_permission_is_a_403_problem(outsider_client, url):
    response = outsider_client.get(url)
    assert response.status_code == 403 and response["Content-Type"] == "application/problem+json"


def test_a_bad_window_is_a_400_problem(viewer_client):
    response = viewer_client.get("/api/v1/stats?window=week")
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "urn:idemdash:problem:bad-window" and "1h, 24h, 7d, 30d" in body["detail"]
