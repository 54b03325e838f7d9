"""PostgreSQL: a delivery stored in one statement.

Through the ORM a new delivery takes six round trips (BEGIN, SAVEPOINT, the event's INSERT,
RELEASE, the delivery's INSERT, COMMIT) and a duplicate nine (the failed INSERT in its
savepoint, the counting UPDATE, a SELECT, the delivery's INSERT). Here both are one
statement of data-modifying CTEs, so the event, its counters and the delivery row still
change together:

- `ins` inserts the event unless (endpoint, dedupe_key) exists (ON CONFLICT DO NOTHING);
- `upd` counts one more delivery on an existing event, flagging a payload that differs;
  it reads with the statement's snapshot, so it never sees the row `ins` inserted;
- `dlv` records the delivery against whichever of the two has a row;
- `task`, with django-q2's ORM broker, writes the event's processing task when `ins`
  inserted it (processing.delivery_task).

It runs on its own, outside any transaction: one statement is atomic, so the event, its
delivery and its task commit together, with one round trip instead of four (BEGIN, the
store, the task's INSERT, COMMIT), and the view answers only after it returns.

Neither has a row when a concurrent delivery of the same event committed after this
statement's snapshot was taken (our INSERT waited for it, then did nothing, and the UPDATE
could not see it); the caller then runs the statement again, with a new snapshot.
SQLite has no data-modifying CTEs and keeps the ORM path in receive.py.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.db import connection
from django_q.models import OrmQ

from idemdash.core.pg import cursor, insert_unless_exists, usable  # noqa: F401
from webhooks.models import WebhookDelivery, WebhookEvent

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
            INSERT INTO {delivery} (event_id, received_at, duplicate, payload_matches, secret_id)
            SELECT id, %s, false, true, %s::bigint FROM ins
            UNION ALL
            SELECT id, %s, true, payload_sha256 = %s, %s::bigint FROM upd
        {task}
        )
        SELECT true AS created, {returned} FROM ins
        UNION ALL
        SELECT false, {returned} FROM upd
    """


def store(
    values: dict[str, Any], now: datetime, secret_id: int | None, task: tuple[str, str] | None = None
) -> tuple[bool, int, str, int, bool] | None:
    """Store one delivery of the event described by `values` (every WebhookEvent field but
    id), and `task` (the ORM broker's queue and package) if the event is new. Returns
    (created, event id, status, delivery count, payload matches), or None when the event
    exists but this statement cannot see it yet."""
    params = [f.get_db_prep_save(values[f.attname], connection) for f in _EVENT_FIELDS]
    digest = values["payload_sha256"]
    params += [now, digest, values["endpoint_id"], values["dedupe_key"], now, secret_id, now, digest, secret_id]
    if task is not None:
        params += [*task, now]
    with cursor() as c:  # prepared on persistent connections, as the receipt store's are
        c.execute(_store_sql(task is not None), params)
        row = c.fetchone()
    if row is None:
        return None
    created, event_id, status, deliveries, sha = row
    return created, event_id, status, deliveries, sha == digest
