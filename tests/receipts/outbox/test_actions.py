from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone as dt_timezone
from email.utils import format_datetime

import pytest
from django.core import mail

from receipts.keys import parse_key
from receipts.outbox import actions
from receipts.outbox.actions import ActionContext, PermanentError, RetryableError

from .receiver import running_receiver

pytestmark = pytest.mark.usefixtures("outbox_may_post_locally")

CTX = ActionContext(key="order-42", scope="", attempt=1, timeout=2)


def respond(status: int, headers: dict | None = None, hold: float = 0.0):
    return lambda key, nth, body: (status, headers or {}, hold)


def test_http_post_sends_json_with_the_idempotency_key():
    with running_receiver() as receiver:
        status = actions.http_post({"url": receiver.url, "json": {"a": 1}, "headers": {"X-Trace": "t"}}, CTX)
    assert status == 200
    assert receiver.requests == {"order-42": 1}
    (headers,) = receiver.headers
    assert headers["X-Trace"] == "t" and headers["Content-Type"] == "application/json"


def test_http_post_lets_no_payload_header_replace_the_key():
    with running_receiver() as receiver:
        actions.http_post({"url": receiver.url, "headers": {"Idempotency-Key": "forged"}}, CTX)
    assert list(receiver.requests) == ["order-42"]


@pytest.mark.parametrize("key, sent", [
    ("order-42", "order-42"),
    ("a,b", '"a,b"'),  # bare, a server would read two keys joined with ","
    ('"quoted"', '"\\"quoted\\""'),
    (" padded ", '" padded "'),  # bare, a server would strip the spaces
])
def test_http_post_sends_a_key_the_receiver_reads_back(key, sent):
    with running_receiver() as receiver:
        actions.http_post({"url": receiver.url}, ActionContext(key=key, scope="", attempt=1, timeout=2))
    assert list(receiver.requests) == [sent]
    assert parse_key(sent) == key


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503])
def test_http_post_retries_transient_statuses(status):
    with running_receiver(respond(status)) as receiver, pytest.raises(RetryableError) as caught:
        actions.http_post({"url": receiver.url}, CTX)
    assert caught.value.status_code == status


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422, 301])
def test_http_post_gives_up_on_other_statuses(status):
    with running_receiver(respond(status, {"Location": "/x"} if status == 301 else {})) as receiver:
        with pytest.raises(PermanentError) as caught:
            actions.http_post({"url": receiver.url}, CTX)
    assert caught.value.status_code == status


def test_http_post_passes_retry_after_seconds_on():
    with running_receiver(respond(503, {"Retry-After": "17"})) as receiver, pytest.raises(RetryableError) as caught:
        actions.http_post({"url": receiver.url}, CTX)
    assert caught.value.retry_after == 17


def test_http_post_passes_a_retry_after_date_on_as_the_seconds_to_it():
    later = format_datetime(datetime.now(dt_timezone.utc) + timedelta(seconds=90), usegmt=True)
    with running_receiver(respond(503, {"Retry-After": later})) as receiver, pytest.raises(RetryableError) as caught:
        actions.http_post({"url": receiver.url}, CTX)
    assert 0 < caught.value.retry_after <= 90


def test_http_post_retries_a_timeout():
    ctx = ActionContext(key="slow", scope="", attempt=1, timeout=0.2)
    gave_up = threading.Event()

    def unanswered(key: str, nth: int, body: object) -> tuple[int, dict[str, str], float]:
        gave_up.wait(30)  # no answer until the post has timed out
        return 200, {}, 0.0

    with running_receiver(unanswered) as receiver:
        with pytest.raises(RetryableError, match="Timeout"):
            actions.http_post({"url": receiver.url}, ctx)
        gave_up.set()


def test_http_post_retries_a_refused_connection():
    with running_receiver() as receiver:
        url = receiver.url
    with pytest.raises(RetryableError):
        actions.http_post({"url": url}, CTX)


def test_email_send_uses_a_message_id_derived_from_the_key():
    # Django's test environment sends every mailer's mail to mail.outbox (locmem).
    payload = {"to": "a@example.com", "subject": "Receipt", "body": "Thanks"}
    actions.email_send(payload, CTX)
    actions.email_send(payload, CTX)  # an at-least-once resend
    first, second = mail.outbox
    assert first.extra_headers["Message-ID"] == second.extra_headers["Message-ID"] == actions.message_id_for("order-42")
    assert first.message()["Message-ID"] == actions.message_id_for("order-42")
    assert actions.message_id_for("order-43") != actions.message_id_for("order-42")


def test_a_project_registers_its_own_action():
    seen = []

    @actions.outbox_action("test.record")
    def record(payload, ctx):
        seen.append((payload, ctx.key))

    try:
        actions.get_action("test.record").perform({"x": 1}, CTX)
        assert seen == [({"x": 1}, "order-42")]
        assert "test.record" in actions.registered()
    finally:
        actions._registry.pop("test.record")


def test_http_post_reaches_only_allowed_hosts_when_a_list_is_set(settings):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["hooks.example.com"]
    actions.get_action("http.post").validate({"url": "https://HOOKS.example.com/x"})
    with pytest.raises(ValueError, match="not in OUTBOX_HTTP_ALLOWED_HOSTS"):
        actions.get_action("http.post").validate({"url": "http://169.254.169.254/latest/meta-data"})


def test_a_message_to_a_host_removed_from_the_list_is_permanent(settings):
    with running_receiver() as receiver:
        settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["hooks.example.com"]
        with pytest.raises(PermanentError):
            actions.http_post({"url": receiver.url}, CTX)
    assert not receiver.requests


# --- refused at enqueue what could never be sent; permanent when met at send ------------------

@pytest.mark.parametrize("payload, field", [
    ({"url": "http://127.0.0.1:9/\r\nX: 1"}, "payload.url"),
    ({"url": "http://127.0.0.1:9/", "headers": {"X-Trace": "a\r\nBcc: x"}}, "payload.headers.X-Trace"),
    ({"url": "http://127.0.0.1:9/", "headers": {"X Trace": "a"}}, "payload.headers.X Trace"),
    ({"url": "http://127.0.0.1:9/", "headers": {"X-Trace": "caf\u00e9"}}, "payload.headers.X-Trace"),
])
def test_http_post_refuses_at_enqueue_what_it_could_never_send_naming_the_field(payload, field):
    with pytest.raises(actions.InvalidPayload) as caught:
        actions.get_action("http.post").validate(payload)
    assert caught.value.field == field


@pytest.mark.parametrize("change, field", [
    ({"subject": "Hi\r\nBcc: victim@example.com"}, "payload.subject"),
    ({"to": "ops@example.com\nBcc: victim@example.com"}, "payload.to"),
    ({"to": "not-an-address"}, "payload.to"),
    ({"cc": ["bad"]}, "payload.cc"),
    ({"from": ["a@example.com"]}, "payload.from"),
])
def test_email_send_refuses_at_enqueue_what_it_could_never_send_naming_the_field(change, field):
    with pytest.raises(actions.InvalidPayload) as caught:
        actions.get_action("email.send").validate({"to": "ops@example.com", "subject": "s", "body": "b", **change})
    assert caught.value.field == field


def test_a_header_the_http_client_refuses_at_send_is_permanent_not_retried():
    # Enqueued before the rule (or written by hand): the first attempt says it is hopeless.
    with running_receiver() as receiver, pytest.raises(PermanentError, match="payload.headers.X-Trace"):
        actions.http_post({"url": receiver.url, "headers": {"X-Trace": "a\r\nX-Injected: 1"}}, CTX)
    assert not receiver.requests


def test_an_email_subject_with_crlf_met_at_send_is_permanent_not_retried():
    with pytest.raises(PermanentError, match="payload.subject"):
        actions.email_send({"to": "ops@example.com", "subject": "Hi\r\nBcc: x@example.com", "body": "b"}, CTX)
    assert not mail.outbox


@pytest.mark.django_db
def test_an_unsendable_message_already_stored_is_dead_at_its_first_attempt():
    from receipts.outbox.drain import drain
    from receipts.outbox.models import OutboxMessage
    from receipts.outbox.store import enqueue

    message = enqueue("email.send", {"to": "ops@example.com", "subject": "s", "body": "b"}, "crlf-1").message
    OutboxMessage.objects.filter(pk=message.pk).update(payload={"to": "ops@example.com", "subject": "a\nb", "body": "b"})
    report = drain(ids=[message.pk])
    message.refresh_from_db()
    assert (report.dead, message.status, message.attempts) == (1, "dead", 1)
    assert message.last_error.startswith("payload.subject")


def test_a_user_password_in_a_url_never_reaches_the_http_clients_log_line(caplog):
    import logging

    caplog.set_level(logging.INFO, logger="httpx")
    with running_receiver() as receiver:
        url = receiver.url.replace("http://", "http://alice:s3cret-pw@")
        assert actions.http_post({"url": url}, CTX) == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert lines and all("s3cret-pw" not in line for line in lines)
    assert any("http://••••@127.0.0.1" in line for line in lines), lines
