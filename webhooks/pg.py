"""PostgreSQL: a delivery stored in one statement, with its event's task.

Through the ORM a new delivery takes six round trips and a duplicate nine; here both are one
statement of data-modifying CTEs, so the event, its counters, the delivery row and the
event's task (a row of django-q2's ORM broker) commit together, and the view answers only
after it returns. webhooks/orm.py is the twin for SQLite, MySQL/MariaDB and psycopg2
(receive.path() chooses)."""

from __future__ import annotations

import functools
from contextlib import nullcontext
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django_q.models import OrmQ

from idemdash.core.pg import cursor, insert_unless_exists
from webhooks.models import Stored, WebhookDelivery, WebhookEvent
from webhooks.processing import delivery_task, enqueue_on_commit

_EVENT_FIELDS = [f for f in WebhookEvent._meta.concrete_fields if not f.primary_key]


@functools.cache
def _store_sql(with_task: bool) -> str:
    q = connection.ops.quote_name
    event, delivery = q(WebhookEvent._meta.db_table), q(WebhookDelivery._meta.db_table)
    task = (
        f"""), task AS (
            INSERT INTO {q(OrmQ._meta.db_table)} (key, payload, lock) SELECT %s, %s, %s FROM ins"""
        if with_task
        else ""
    )
    returned = "id, status, delivery_count, payload_sha256"
    # `ins` inserts the event unless (endpoint, dedupe_key) exists (ON CONFLICT DO NOTHING);
    # `upd` counts one more delivery on an existing event, flagging a payload that differs; it
    # reads with the statement's snapshot, so it never sees the row `ins` inserted; `dlv`
    # records the delivery against whichever of the two has a row; `task`, with django-q2's
    # ORM broker, writes the new event's processing task (processing.delivery_task) as the
    # broker's own enqueue writes it (OrmQ: key, payload, lock).
    return f"""
        WITH ins AS (
            {insert_unless_exists(WebhookEvent, _EVENT_FIELDS, "endpoint_id, dedupe_key", returned)}
        ), upd AS (
            UPDATE {event}
            SET delivery_count = delivery_count + 1, last_delivery_at = %s,
                payload_mismatch = payload_mismatch OR payload_sha256 <> %s
            WHERE endpoint_id = %s AND dedupe_key = %s
            RETURNING {returned}
        ), dlv AS (
            INSERT INTO {delivery} (event_id, received_at, delivery_id, duplicate, payload_matches, secret_id)
            SELECT id, %s, %s, false, true, %s::bigint FROM ins
            UNION ALL
            SELECT id, %s, %s, true, payload_sha256 = %s, %s::bigint FROM upd
        {task}
        )
        SELECT true AS created, {returned} FROM ins
        UNION ALL
        SELECT false, {returned} FROM upd
    """


def store(values: dict[str, Any], now: datetime, secret_id: int | None, delivery_id: str) -> Stored | None:
    """Store one delivery of the event described by `values` (every WebhookEvent field but
    id), with the event's task if the event is new and not held. None when the event exists
    but this statement cannot see it yet: a concurrent delivery of the same event committed
    after this statement's snapshot was taken (our INSERT waited for it, then did nothing, and
    the UPDATE could not see it); the caller then runs the statement again, with a new snapshot."""
    received = values["status"] == WebhookEvent.Status.RECEIVED
    # The task is written by the statement with the ORM broker; with another broker (or
    # django-q2's sync mode) it is None, and the event is enqueued after the commit.
    task = delivery_task(values["endpoint_id"], values["dedupe_key"], values["traceparent"]) if received else None
    params = [f.get_db_prep_save(values[f.attname], connection) for f in _EVENT_FIELDS]
    digest = values["payload_sha256"]
    params += [now, digest, values["endpoint_id"], values["dedupe_key"], now, delivery_id, secret_id,
               now, delivery_id, digest, secret_id]
    if task is not None:
        params += [*task, now]
    with _atomic():
        with cursor() as c:  # prepared on persistent connections, as the receipt store's are
            c.execute(_store_sql(task is not None), params)
            row = c.fetchone()
        if row is None:
            return None
        created, event_id, status, deliveries, sha = row
        if created and received and task is None:
            enqueue_on_commit(event_id)
    event = WebhookEvent(id=event_id, **values) if created else None
    return Stored(event_id, status, deliveries, created, sha == digest, event)


def _atomic() -> Any:
    """The statement is atomic on its own and holds its task (or the task is told after the
    commit), so it runs without a transaction of ours: one round trip instead of four (BEGIN,
    the store, the task's INSERT, COMMIT). Inside a caller's transaction it still
    gets a savepoint, so that a payload the database refuses leaves that transaction usable."""
    if not transaction.get_connection().in_atomic_block:
        return nullcontext()
    return transaction.atomic()
