"""Bulk loader: realistic receipts, attempts, webhook events and outbox messages at scale
(docs/benchmarks.md, "The bulk loader"), for `manage.py seed` and `make bench`.

Every seeded row is recognisable and nothing else is ever touched: keys start with `seed_`,
scopes name `seed_` principals, webhook events belong to the `seed-*` endpoints;
`delete_seeded()` removes exactly those. Rows are generated in Python by one set of functions
and written in batches (`_write`); `seed_receipts_sql` writes tens of millions in SQL."""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone

from idemdash.core import rollup
from receipts.models import Attempt, Receipt
from receipts.outbox.models import OutboxAttempt, OutboxMessage
from webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEvent, WebhookSecret

PREFIX = "seed_"

Progress = Callable[[str, int], Callable[[int], None]]


OPERATIONS = {
    "payment.create": 30, "order.create": 20, "email.send": 14, "refund.create": 8, "ledger.post": 7,
    "user.signup": 6, "subscription.update": 6, "webhook.forward": 5, "report.build": 4,
}
STRIPE_TYPES = {
    "payment_intent.succeeded": 30, "charge.succeeded": 25, "invoice.paid": 12, "customer.subscription.updated": 10,
    "payment_intent.payment_failed": 6, "charge.refunded": 5, "checkout.session.completed": 8, "customer.created": 4,
}
SHOPIFY_TYPES = {"orders/create": 50, "orders/paid": 30, "orders/fulfilled": 15, "refunds/create": 5}
STANDARD_TYPES = {"invoice.created": 40, "user.updated": 35, "payment.settled": 25}
OUTBOX_ACTIONS = {"email.send": 45, "http.post": 35, "webhook.forward": 15, "slack.notify": 5}
ENDPOINTS = {"seed-stripe": ("stripe", STRIPE_TYPES), "seed-shopify": ("shopify", SHOPIFY_TYPES),
             "seed-standard": ("standard", STANDARD_TYPES)}
ENDPOINT_WEIGHTS = {"seed-stripe": 70, "seed-shopify": 20, "seed-standard": 10}


def _choice(weights: dict[str, int]) -> Callable[[random.Random], str]:
    """Weighted choice from a fixed table; much faster than random.choices per call."""
    table = [name for name, weight in weights.items() for _ in range(weight)]
    return lambda rng: table[int(rng.random() * len(table))]


_operation = _choice(OPERATIONS)
_endpoint = _choice(ENDPOINT_WEIGHTS)
_event_types = {slug: _choice(types) for slug, (_, types) in ENDPOINTS.items()}
_action = _choice(OUTBOX_ACTIONS)


def _scope(rng: random.Random) -> str:
    # A few API clients make most requests (skewed), and many users make a few each.
    if rng.random() < 0.8:
        return f"client:{PREFIX}{int(20 * rng.random() ** 2):02d}"
    return f"user:{PREFIX}{rng.randrange(2000)}"


def order_id(tag: str, i: int) -> str:
    """The business id row i of each kind carries, as one order's payment, webhook and email
    would: what the dashboard's search and trace find by (`make bench` scenario 11)."""
    return f"ord_{tag}_{i}"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# Rows of one model as dicts of column values, each with the dicts of its children.
Rows = Iterator[tuple[dict, list[dict]]]


# The TTL of the receipts `seed --expired` writes: each expires that long after its claim,
# and every one has expired by the time it is written.
EXPIRED_TTL = timedelta(days=3)


def _moment(rng: random.Random, now: datetime, i: int, total: int) -> datetime:
    """Row i of `total`, over the last 30 days in insertion order (with jitter), as a live log
    is written: a time-range query reads the pages a real one would, not a random scatter."""
    return now - timedelta(seconds=30 * 86400 * (1 - (i + rng.random()) / total))


def receipt_rows(rng: random.Random, tag: str, start: int, count: int, now: datetime,
                 *, total: int, expired_only: bool = False) -> Rows:
    """Receipt rows and their Attempt rows. Timestamps spread over 30 days; 92% completed (a
    few with a stored 4xx), 5% failed (most retryable, some retried), 3% processing, of which
    most are stuck (lease long expired) and the rest live; ~10% already expired (as if the
    operations kept receipts for up to five weeks, so that a month is still in the log).
    Attempts: the claim, the settle, replays for ~30% of keys (a few each), 409s for ~3%, 422
    mismatches (with the rejected request) for ~1%, lease takeovers for some stuck ones."""
    for i in range(start, start + count):
        key = f"{PREFIX}{tag}_{i}"
        operation = _operation(rng)
        created = _moment(rng, now, i, total)
        if expired_only:
            created -= EXPIRED_TTL
        roll = rng.random()
        attempts_log: list[dict] = []
        request = ({"amount": rng.randrange(100, 100_000), "currency": "eur", "ref": i, "order": order_id(tag, i)}
                   if rng.random() < 0.6 else None)
        fingerprint = _sha(key + operation)
        r: dict[str, Any] = {
            "scope": _scope(rng), "key": key, "operation": operation, "fingerprint": fingerprint,
            "request": request, "retryable": True, "response_status": None,
            "response_content_type": "", "response_body": "", "error": "", "attempts": 1,
            "fencing_token": 1, "lease_expires_at": None, "completed_at": None,
            "user_id": "", "session_id": "",
        }

        def log(outcome: str, at: datetime, token: int | None = None, **extra: Any) -> None:
            attempts_log.append({"scope": r["scope"], "key": key, "operation": operation,
                                 "outcome": outcome, "fencing_token": token, "fingerprint": fingerprint,
                                 "request": None, "detail": "", "actor": "", "created_at": at, **extra})

        log("claimed", created, 1)
        if roll < 0.92:  # completed
            done = created + timedelta(milliseconds=20 + rng.random() ** 3 * 3000)
            status_code = 201 if rng.random() < 0.97 else rng.choice((402, 404, 409))
            r.update(status="completed", response_status=status_code, response_content_type="application/json",
                     response_body=_json({"id": i, "ok": status_code < 400}), completed_at=done)
            log("completed", done, 1)
            settled = done
        elif roll < 0.97:  # failed, perhaps retried and failed again
            tries = 1 if rng.random() < 0.7 else rng.randrange(2, 5)
            at = created
            for t in range(1, tries + 1):
                if t > 1:
                    at += timedelta(seconds=rng.random() * 120)
                    log("retried_after_failure", at, t)
                at += timedelta(milliseconds=50 + rng.random() * 5000)
                log("failed", at, t, detail="upstream timeout" if rng.random() < 0.6 else "card declined")
            r.update(status="failed", retryable=rng.random() < 0.85, attempts=tries, fencing_token=tries,
                     error=attempts_log[-1]["detail"])
            settled = at
        else:  # processing: mostly stuck (worker died), a few live
            if rng.random() < 0.7 or expired_only:
                r.update(status="processing", lease_expires_at=created + timedelta(seconds=30))
                if rng.random() < 0.2:
                    at = created + timedelta(seconds=31 + rng.random() * 600)
                    r.update(attempts=2, fencing_token=2, lease_expires_at=at + timedelta(seconds=30))
                    log("lease_takeover", at, 2)
            else:
                created = now - timedelta(seconds=rng.random() * 20)
                attempts_log[0]["created_at"] = created
                r.update(status="processing", lease_expires_at=created + timedelta(seconds=30))
            settled = created
        if rng.random() < 0.03:
            log("in_progress", created + (settled - created) / 2)
        if r["status"] != "processing" and rng.random() < 0.3:
            at = settled
            for _ in range(1 + int(rng.random() ** 2 * 6)):
                at += timedelta(seconds=rng.random() * 900)
                log("replayed", at)
        if rng.random() < 0.01:
            log("mismatch", settled + timedelta(seconds=rng.random() * 600),
                request={"amount": rng.randrange(100, 100_000), "currency": "usd", "ref": i})
        last = max(a["created_at"] for a in attempts_log)
        if expired_only:
            # They expire in the order they were claimed, as live receipts do (expiry is
            # the claim's time plus a TTL): the backlog of a purge that stopped for a while,
            # on disk roughly in expiry order, not a random scatter over the table.
            expires = max(created + EXPIRED_TTL - timedelta(seconds=60), last + timedelta(seconds=1))
        elif rng.random() < 0.1:
            expires = now - timedelta(seconds=60 + rng.random() * 3 * 86400)
            if expires < last:  # an expired receipt was settled before it expired
                expires = last + timedelta(seconds=1)
                if expires > now:
                    expires = now - timedelta(seconds=1)
        else:
            expires = now + timedelta(seconds=3600 + rng.random() * 7 * 86400)
        r.update(created_at=created, updated_at=last, expires_at=expires)
        yield r, attempts_log


def event_rows(rng: random.Random, tag: str, start: int, count: int, now: datetime,
               endpoints: dict[str, tuple[int, int]], *, total: int) -> Rows:
    """WebhookEvent rows and their WebhookDelivery rows. `endpoints`: slug -> (id, secret id)."""
    for i in range(start, start + count):
        slug = _endpoint(rng)
        provider = ENDPOINTS[slug][0]
        endpoint_id, secret_id = endpoints[slug]
        event_type = _event_types[slug](rng)
        received = _moment(rng, now, i, total)
        event_id = f"evt_{PREFIX}{tag}_{i}"
        payload = {"id": event_id, "object": "event", "type": event_type, "created": int(received.timestamp()),
                   "data": {"object": {"id": f"pi_{tag}_{i}", "amount": rng.randrange(100, 100_000),
                                       "currency": "eur", "status": "succeeded",
                                       "metadata": {"order_id": order_id(tag, i)}}}}
        duplicates = 0 if rng.random() < 0.8 else 1 + int(rng.random() ** 3 * 8)
        roll = rng.random()
        status, attempts, finished, error, lease, token = "completed", 1, None, "", None, None
        if roll < 0.90:
            finished = received + timedelta(milliseconds=100 + rng.random() * 2000)
        elif roll < 0.94:
            status, finished = "ignored", received + timedelta(milliseconds=50)
        elif roll < 0.96:
            status, attempts, error = "retry", rng.randrange(2, 6), "HTTP 503 from fulfilment"
        elif roll < 0.97:
            status, attempts, error = "dead", 8, "Traceback (most recent call last): ... KeyError: 'customer'"
            finished = received + timedelta(hours=rng.random() * 30)
        elif roll < 0.985:
            status, attempts = "received", 0
        elif roll < 0.99:
            status, token = "processing", str(uuid.UUID(int=rng.getrandbits(128)))
            lease = received + timedelta(seconds=90)
        else:
            status, attempts = "held", 0
        deliveries = [{"received_at": received, "duplicate": False, "payload_matches": True, "secret_id": secret_id}]
        at = received
        mismatch = False
        for _ in range(duplicates):
            at += timedelta(seconds=rng.random() * 3600)
            matches = rng.random() > 0.01
            mismatch = mismatch or not matches
            deliveries.append({"received_at": at, "duplicate": True, "payload_matches": matches, "secret_id": secret_id})
        yield {
            "endpoint_id": endpoint_id, "provider": provider, "dedupe_key": event_id, "event_type": event_type,
            "provider_event_id": event_id, "account": "", "payload": payload,
            "payload_sha256": _sha(event_id), "payload_mismatch": mismatch, "status": status,
            "attempts": attempts, "next_attempt_at": received + timedelta(minutes=attempts),
            "lease_expires_at": lease, "fencing_token": token, "enqueued_at": received,
            "stuck_recoveries": 0, "last_error": error, "delivery_count": len(deliveries),
            "received_at": received, "last_delivery_at": at, "finished_at": finished,
        }, deliveries


def outbox_rows(rng: random.Random, tag: str, start: int, count: int, now: datetime, *, total: int) -> Rows:
    for i in range(start, start + count):
        key = f"{PREFIX}{tag}_{i}"
        scope = _scope(rng) if rng.random() < 0.3 else ""
        action = _action(rng)
        created = _moment(rng, now, i, total)
        roll = rng.random()
        if roll < 0.93:
            status, tries = "sent", 1 if rng.random() < 0.9 else rng.randrange(2, 5)
        elif roll < 0.95:
            status, tries = "pending", 0
        elif roll < 0.955:
            status, tries = "in_flight", 1
        elif roll < 0.98:
            status, tries = "retry", rng.randrange(1, 6)
        else:
            status, tries = "dead", 10
        log = []
        at = created
        for n in range(1, tries + 1):
            at += timedelta(seconds=rng.random() * (2 ** n) * 30)
            last = n == tries
            if status == "sent" and last:
                outcome, code, error = "sent", 200, ""
            elif status == "in_flight" and last:
                break
            elif status == "dead" and last:
                outcome, code, error = "dead", 410, "HTTP 410 Gone"
            else:
                outcome, code, error = "retry", 503, "HTTP 503 Service Unavailable"
            log.append({"scope": scope, "key": key, "action": action, "number": n, "fencing_token": n,
                        "outcome": outcome, "status_code": code, "error": error,
                        "duration_ms": int(20 + rng.random() ** 3 * 4000), "drainer": "seed", "created_at": at})
        yield {
            "scope": scope, "key": key, "action": action,
            # What the claim filters paused hosts by (receipts/outbox/pauses.py).
            "destination_host": "example.com" if action == "http.post" else "",
            "payload": ({"to": f"user{i}@example.com", "template": "receipt", "order": order_id(tag, i)}
                        if action == "email.send" else {"url": "https://example.com/hook", "body": {"n": i, "order": order_id(tag, i)}}),
            "fingerprint": _sha(key + action), "status": status, "attempts": tries,
            "next_attempt_at": at + timedelta(minutes=5) if status in ("pending", "retry") else at,
            "fencing_token": tries,
            "lease_expires_at": at + timedelta(seconds=60) if status == "in_flight" else None,
            "claimed_by": "seed" if status == "in_flight" else "",
            "last_error": log[-1]["error"] if log else "",
            "last_status_code": log[-1]["status_code"] if log else None,
            "created_at": created, "updated_at": at, "sent_at": at if status == "sent" else None,
        }, log


def _insert(model: type[models.Model], rows: list[dict], *, ids: bool) -> list[int]:
    """Inserts dict rows of one model; returns their ids in order. On PostgreSQL with COPY
    (ids reserved from the table's sequence up front, so child rows can point at their
    parents without a round trip per row), elsewhere with `bulk_create`."""
    if not rows:
        return []
    if connection.vendor != "postgresql":
        objs = model.objects.bulk_create([model(**row) for row in rows], batch_size=500)
        return [obj.pk for obj in objs] if ids else []
    table = model._meta.db_table
    # Rows are keyed by attribute name (as bulk_create wants); COPY names columns (a
    # foreign key's attribute is `<name>_id`, its column may be named otherwise).
    columns = [model._meta.get_field(name).column for name in rows[0]]
    reserved: list[int] = []
    with connection.cursor() as cursor:
        if ids:
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                [table, len(rows)],
            )
            reserved = [row[0] for row in cursor.fetchall()]
            columns = ["id", *columns]
        quoted = ", ".join(connection.ops.quote_name(c) for c in columns)
        raw = cursor.cursor  # the psycopg cursor under Django's wrapper
        with raw.copy(f"COPY {connection.ops.quote_name(table)} ({quoted}) FROM STDIN") as copy:
            for n, row in enumerate(rows):
                # JSON columns arrive as Python values, as bulk_create wants them.
                values = [_json(v) if isinstance(v, (dict, list)) else v for v in row.values()]
                copy.write_row((reserved[n], *values) if ids else values)
    return reserved


def _write(parent: type[models.Model], child: type[models.Model], fk: str, rows: Rows) -> int:
    """Parents and children in one transaction; returns the number of child rows."""
    parents, kids = zip(*rows)
    with transaction.atomic():
        parent_ids = _insert(parent, list(parents), ids=True)
        children = [{**c, fk: pk} for pk, some in zip(parent_ids, kids) for c in some]
        _insert(child, children, ids=False)
    return len(children)


def endpoint_secret(slug: str, provider: str, description: str) -> WebhookSecret:
    """The active signing secret of the endpoint `slug`, each made if missing."""
    endpoint, _ = WebhookEndpoint.objects.get_or_create(slug=slug, defaults={"provider": provider,
                                                                             "description": description})
    return (WebhookSecret.objects.filter(endpoint=endpoint, active=True).first()
            or WebhookSecret.objects.create(endpoint=endpoint, secret="whsec_" + uuid.uuid4().hex))


def seed_endpoints() -> dict[str, tuple[int, int]]:
    """The seed's own webhook endpoints, each with a secret: slug -> (endpoint id, secret id)."""
    found = {slug: endpoint_secret(slug, provider, "seeded test data") for slug, (provider, _) in ENDPOINTS.items()}
    return {slug: (secret.endpoint_id, secret.pk) for slug, secret in found.items()}


@dataclass
class SeedCounts:
    receipts: int = 0
    attempts: int = 0
    events: int = 0
    deliveries: int = 0
    outbox: int = 0
    outbox_attempts: int = 0


def _batches(total: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, total, size):
        yield start, min(size, total - start)


def seed(
    *,
    receipts: int = 0,
    events: int = 0,
    outbox: int = 0,
    batch: int = 10_000,
    rng_seed: int | None = None,
    now: datetime | None = None,
    expired_only: bool = False,
    progress: Progress | None = None,
) -> SeedCounts:
    """Insert seeded rows. Each call gets a fresh tag, so calls add to each other and keys
    never collide. `progress(name, total)` may return a callback fed each batch's count."""
    now = now or timezone.now()
    rng = random.Random(rng_seed)
    tag = uuid.UUID(int=rng.getrandbits(128)).hex[:8]
    counts = SeedCounts()
    endpoints = seed_endpoints() if events else {}
    # (name, total, one batch's rows, the parent and child models, the child's link, the child's count)
    plan = [
        ("receipts", receipts, lambda start, count: receipt_rows(rng, tag, start, count, now, total=receipts,
                                                                 expired_only=expired_only),
         Receipt, Attempt, "receipt_id", "attempts"),
        ("events", events, lambda start, count: event_rows(rng, tag, start, count, now, endpoints, total=events),
         WebhookEvent, WebhookDelivery, "event_id", "deliveries"),
        ("outbox", outbox, lambda start, count: outbox_rows(rng, tag, start, count, now, total=outbox),
         OutboxMessage, OutboxAttempt, "message_id", "outbox_attempts"),
    ]
    plan = [step for step in plan if step[1]]
    for name, total, rows, parent, child, fk, children in plan:
        advance = progress(name, total) if progress else None
        for start, count in _batches(total, batch):
            setattr(counts, children, getattr(counts, children) + _write(parent, child, fk, rows(start, count)))
            setattr(counts, name, getattr(counts, name) + count)
            if advance:
                advance(count)
    # VACUUM cannot run in a transaction; seed() is called outside one.
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        vacuum_analyze([model._meta.db_table for _, _, _, parent, child, _, _ in plan for model in (parent, child)])
    if receipts or events:
        # Attempts and deliveries written into past hours: a roll-up never revisits hours
        # older than its repair span unless told to.
        recount(now - timedelta(days=30))
    return counts


def vacuum_analyze(tables: list[str]) -> None:
    """What autovacuum would have done to a freshly loaded table: fresh statistics for the
    planner, and a visibility map, so index-only scans are possible as in production."""
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"VACUUM (ANALYZE) {connection.ops.quote_name(table)}")


def recount(since: datetime | None) -> None:
    """Hand the hours since `since` (None: all) back to every roll-up and recount them."""
    rollup.rewind(since)
    rollup.catch_up()


@contextlib.contextmanager
def progress_bars(file: Any, prefix: str = "") -> Iterator[Progress]:
    """A `progress` for seed(): a tqdm bar per table, one at a time, all closed on the way out."""
    from tqdm import tqdm

    bars: list[tqdm] = []

    def progress(name: str, total: int) -> Callable[[int], None]:
        for done in bars:
            done.close()  # the tables load one after another
        bars.append(tqdm(total=total, desc=prefix + name, unit="row", unit_scale=True, file=file))
        return bars[-1].update

    try:
        yield progress
    finally:
        for bar in bars:
            bar.close()


def seeded_receipts() -> models.QuerySet:
    return Receipt.objects.filter(key__startswith=PREFIX, scope__contains=f":{PREFIX}")


def seeded_events() -> models.QuerySet:
    return WebhookEvent.objects.filter(endpoint__slug__in=list(ENDPOINTS))


def seeded_outbox() -> models.QuerySet:
    return OutboxMessage.objects.filter(key__startswith=PREFIX).filter(
        models.Q(scope="") | models.Q(scope__contains=f":{PREFIX}")
    )


def delete_seeded() -> dict[str, int]:
    """Delete every seeded row and nothing else: children first, each with one DELETE
    (Django's collector would load millions of rows to cascade). No row outside the seed can
    point at a seeded one, and if one did, its foreign key would refuse the delete."""
    deleted: dict[str, int] = {}

    def raw(qs: models.QuerySet) -> int:
        return qs._raw_delete(qs.db)

    with transaction.atomic():
        deleted["attempts"] = raw(Attempt.objects.filter(key__startswith=PREFIX, scope__contains=f":{PREFIX}"))
        deleted["receipts"] = raw(seeded_receipts())
        slugs = list(ENDPOINTS)
        deleted["deliveries"] = raw(WebhookDelivery.objects.filter(event__endpoint__slug__in=slugs))
        deleted["events"] = raw(seeded_events())
        raw(WebhookSecret.objects.filter(endpoint__slug__in=slugs))
        raw(WebhookEndpoint.objects.filter(slug__in=slugs))
        deleted["outbox_attempts"] = raw(OutboxAttempt.objects.filter(key__startswith=PREFIX, drainer="seed"))
        deleted["outbox"] = raw(seeded_outbox())
    if deleted["attempts"] or deleted["deliveries"]:
        recount(None)  # seeded rows may lie in any hour
    return deleted


# The weights of OPERATIONS as a SQL array of names, one entry per weight unit.
_OPERATION_TABLE = [name for name, weight in OPERATIONS.items() for _ in range(weight)]


def seed_receipts_sql(total: int, *, chunk: int = 500_000, now: datetime | None = None,
                      progress: Progress | None = None) -> SeedCounts:
    """`total` receipts and three attempts each (claimed, settled, replayed) by `INSERT ...
    SELECT generate_series`, a transaction per `chunk`: no row goes through Python, so 10 M
    receipts take the database's time, not hours. Marked and shaped as the loader's in the
    figures the pages read (30 days in insertion order, 92% completed, 5% failed, 3% stuck,
    10% expired, 60% with an order id). PostgreSQL only."""
    now = now or timezone.now()
    tag = uuid.uuid4().hex[:8]
    receipt, attempt = Receipt._meta.db_table, Attempt._meta.db_table
    counts = SeedCounts()
    advance = progress("receipts (SQL)", total) if progress else None
    span = 30 * 86400.0
    # Adding at least as many rows as there are, the secondary indexes are cheaper built once
    # afterwards (a sort each) than kept up row by row (eleven on the two tables, a GIN among them).
    with _indexes_set_aside([receipt, attempt], total >= Receipt.objects.count()):
        for start, count in _batches(total, chunk):
            with transaction.atomic(), connection.cursor() as c:
                c.execute(
                    f"""
                    WITH src AS (
                        SELECT i, %(now)s::timestamptz - make_interval(secs => %(span)s * (1 - (i + 0.5) / %(total)s)) AS at,
                               i %% 100 AS roll, (%(ops)s::text[])[1 + (i * 7919) %% %(nops)s] AS op
                        FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS i
                    ), ins AS (
                        INSERT INTO {receipt} (scope, key, operation, fingerprint, request, status, retryable,
                            response_status, response_content_type, response_body, error, attempts, fencing_token,
                            lease_expires_at, created_at, updated_at, completed_at, expires_at, user_id, session_id,
                            waiters, released_at, released_by, release_reason, compacted_at)
                        SELECT
                            CASE WHEN i %% 5 = 4 THEN 'user:' || %(prefix)s || (i %% 2000) ELSE 'client:' || %(prefix)s || lpad((i %% 20)::text, 2, '0') END,
                            %(prefix)s || %(tag)s || '_' || i, op, md5(i::text || %(tag)s) || md5(op || i::text),
                            CASE WHEN i %% 5 < 3 THEN jsonb_build_object('amount', 100 + (i * 31) %% 99900, 'currency', 'eur',
                                'ref', i, 'order', 'ord_' || %(tag)s || '_' || i) END,
                            CASE WHEN roll < 92 THEN 'completed' WHEN roll < 97 THEN 'failed' ELSE 'processing' END,
                            roll < 95, CASE WHEN roll < 92 THEN 201 END,
                            CASE WHEN roll < 92 THEN 'application/json' ELSE '' END,
                            CASE WHEN roll < 92 THEN '{{"id":' || i || ',"ok":true}}' ELSE '' END,
                            CASE WHEN roll BETWEEN 92 AND 96 THEN 'upstream timeout' ELSE '' END,
                            1, 1, CASE WHEN roll >= 97 THEN at + interval '30 seconds' END,
                            at, at + interval '1 second', CASE WHEN roll < 92 THEN at + interval '1 second' END,
                            -- a tenth expired, three days after their claim (in claim order, as a purge backlog is)
                            CASE WHEN (i * 7) %% 10 = 3 THEN LEAST(at + interval '3 days', %(now)s::timestamptz - interval '1 minute')
                                 ELSE %(now)s::timestamptz + interval '1 hour' + make_interval(secs => (i %% 604800)) END,
                            '', '', false, NULL, '', '', NULL
                        FROM src
                        RETURNING id, scope, key, operation, fingerprint, status, created_at
                    )
                    INSERT INTO {attempt} (receipt_id, scope, key, operation, outcome, fencing_token, fingerprint,
                        request, detail, actor, created_at, waited_ms)
                    SELECT id, scope, key, operation, o.outcome, o.token, fingerprint, NULL, '', '', created_at + o.after, NULL
                    FROM ins, LATERAL (VALUES
                        ('claimed', 1, interval '0'),
                        (CASE status WHEN 'completed' THEN 'completed' WHEN 'failed' THEN 'failed' ELSE 'in_progress' END,
                         1, interval '1 second'),
                        (CASE WHEN status = 'processing' THEN 'in_progress' ELSE 'replayed' END, NULL, interval '10 minutes')
                    ) AS o(outcome, token, after)
                    """,
                    {"now": now, "span": span, "total": total, "ops": _OPERATION_TABLE, "nops": len(_OPERATION_TABLE),
                     "start": start, "stop": start + count - 1, "prefix": PREFIX, "tag": tag},
                )
                counts.attempts += c.rowcount
            counts.receipts += count
            if advance:
                advance(count)
    vacuum_analyze([receipt, attempt])
    recount(now - timedelta(days=30))
    return counts


@contextlib.contextmanager
def _indexes_set_aside(tables: list[str], when: bool) -> Iterator[None]:
    """With `when`, the indexes of `tables` that are neither unique nor a constraint's (so no
    rule of the data is off meanwhile) are dropped inside, and built again on the way out."""
    if not when:
        yield
        return
    with transaction.atomic(), connection.cursor() as c:
        c.execute(
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "WHERE i.indrelid = ANY(%s::regclass[]) AND NOT i.indisunique AND NOT i.indisprimary "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
            [tables],
        )
        found = c.fetchall()
        for name, _ in found:
            c.execute(f"DROP INDEX {name}")
    try:
        yield
    finally:
        with connection.cursor() as c:
            c.execute("SET maintenance_work_mem = '256MB'")  # this session's builds sort in memory
            for _, definition in found:
                c.execute(definition)
            c.execute("RESET maintenance_work_mem")

