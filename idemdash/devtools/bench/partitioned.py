"""Scenario 13's prototype: receipts past one table (docs/architecture.md, "Past one table").

A unique index on a partitioned table must include the partition key, so the receipt is split
in three (`create`): `claims`, hash-partitioned by (scope, key), so uniqueness holds across
partitions; `attempts` and `bodies`, range-partitioned by day, so retention drops a day whole.
The `_single` twins are the same tables unpartitioned, to tell what partitioning itself
costs. The load runs in OS processes (`Racers`), beside receipts.store.claim."""

from __future__ import annotations

import multiprocessing
import time
from datetime import date, datetime, time as dt_time, timedelta, timezone as dt_timezone
from multiprocessing.connection import Connection
from typing import Any

import psycopg
from psycopg import sql

from idemdash.devtools.bench.loadgen import LoadResult

SCHEMA = "past_one_table"
CLAIM_PARTITIONS = 16
DAYS = 3  # today, yesterday and the day before: retention drops the oldest
PRODUCT_SCOPE = "bench"  # the bench view's scope, which every run starts by deleting


# Each table's columns, how it is partitioned and its other indexes: `attempts` and `bodies` are
# found from a claim by (scope, key) within its day, and listed by age.
TABLES = {
    "claims": ("scope text NOT NULL, key text NOT NULL, status text NOT NULL, fencing_token bigint NOT NULL, "
               "fingerprint text NOT NULL, lease_expires_at timestamptz, expires_at timestamptz, "
               "attempt_day date NOT NULL, PRIMARY KEY (scope, key)", "HASH (scope, key)", ["expires_at"]),
    "attempts": ("scope text NOT NULL, key text NOT NULL, outcome text NOT NULL, fencing_token bigint, "
                 "fingerprint text NOT NULL, created_at timestamptz NOT NULL", "RANGE (created_at)",
                 ["scope, key", "created_at"]),
    "bodies": ("scope text NOT NULL, key text NOT NULL, request jsonb, response jsonb, created_at timestamptz NOT NULL",
               "RANGE (created_at)", ["scope, key", "created_at"]),
}


def days_back(today: date, n: int = DAYS) -> list[date]:
    return [today - timedelta(days=i) for i in range(n)]


def create(conn: psycopg.Connection, today: date, schema: str = SCHEMA) -> None:
    """(Re)create the schema: the partitioned tables, a partition per day of `days_back(today)`,
    and their unpartitioned twins. `attempts` and `bodies` have no unique index across days and
    are found from a claim by (scope, key, day)."""
    s = sql.Identifier(schema)
    with conn.transaction():
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(s))
        for suffix, partitioned in (("", True), ("_single", False)):
            for table, (columns, partition_by, indexes) in TABLES.items():
                t = sql.Identifier(schema, table + suffix)
                by = sql.SQL(f" PARTITION BY {partition_by}" if partitioned else "")
                conn.execute(sql.SQL("CREATE TABLE {t} ({columns}){by}").format(t=t, columns=sql.SQL(columns), by=by))
                for index in indexes:
                    conn.execute(sql.SQL("CREATE INDEX ON {t} ({index})").format(t=t, index=sql.SQL(index)))
        for n in range(CLAIM_PARTITIONS):
            conn.execute(sql.SQL(
                "CREATE TABLE {s}.{p} PARTITION OF {s}.claims FOR VALUES WITH (MODULUS {m}, REMAINDER {r})"
            ).format(s=s, p=sql.Identifier(f"claims_h{n}"), m=sql.Literal(CLAIM_PARTITIONS), r=sql.Literal(n)))
        for day in days_back(today):
            add_day(conn, day, schema)


def day_partition(table: str, day: date) -> str:
    return f"{table}_{day:%Y%m%d}"


def add_day(conn: psycopg.Connection, day: date, schema: str = SCHEMA) -> None:
    """The day's partitions of `attempts` and `bodies` (in production made ahead of the day)."""
    start = datetime.combine(day, dt_time(), dt_timezone.utc)
    for table in ("attempts", "bodies"):
        conn.execute(sql.SQL("CREATE TABLE {s}.{p} PARTITION OF {s}.{t} FOR VALUES FROM ({a}) TO ({b})").format(
            s=sql.Identifier(schema), p=sql.Identifier(day_partition(table, day)), t=sql.Identifier(table),
            a=sql.Literal(start), b=sql.Literal(start + timedelta(days=1))))


def drop_day(conn: psycopg.Connection, day: date, schema: str = SCHEMA) -> None:
    """Retention of a day: detach (the parent's lock stays short), then drop, each partition."""
    with conn.transaction():
        for table in ("attempts", "bodies"):
            part = sql.Identifier(schema, day_partition(table, day))
            conn.execute(sql.SQL("ALTER TABLE {t} DETACH PARTITION {p}").format(
                t=sql.Identifier(schema, table), p=part))
            conn.execute(sql.SQL("DROP TABLE {p}").format(p=part))


def claim_sql(suffix: str = "", schema: str = SCHEMA) -> sql.Composed:
    """One statement: the claim row if the key is new, and only then its attempt and body rows.
    Returns the fencing token, or no row when the key was taken. Commits without waiting for
    its WAL flush, as the product's claim does outside a caller's transaction
    (docs/receipt-store.md), so both are measured alike."""
    t = {name: sql.Identifier(schema, f"{name}{suffix}") for name in ("claims", "attempts", "bodies")}
    return sql.SQL("""
        WITH arg AS (
            SELECT %(scope)s::text AS scope, %(key)s::text AS key, %(fp)s::text AS fp, %(now)s::timestamptz AS now
        ), ins AS (
            INSERT INTO {claims} (scope, key, status, fencing_token, fingerprint, lease_expires_at, expires_at,
                                  attempt_day)
            SELECT scope, key, 'processing', 1, fp, now + make_interval(secs => %(lease)s),
                   now + make_interval(secs => %(ttl)s), (now AT TIME ZONE 'UTC')::date
            FROM arg
            ON CONFLICT (scope, key) DO NOTHING
            RETURNING scope, key, fencing_token, fingerprint
        ), log AS (
            INSERT INTO {attempts} (scope, key, outcome, fencing_token, fingerprint, created_at)
            SELECT ins.scope, ins.key, 'claimed', ins.fencing_token, ins.fingerprint, arg.now FROM ins, arg
        ), body AS (
            INSERT INTO {bodies} (scope, key, request, created_at)
            SELECT ins.scope, ins.key, %(request)s::jsonb, arg.now FROM ins, arg
        )
        SELECT fencing_token, set_config('synchronous_commit', 'off', true) FROM ins
    """).format(**t)


def claim(conn: psycopg.Connection, statement: sql.Composed, scope: str, key: str, request: str,
          now: datetime | None = None) -> int | None:
    """Claim (scope, key) on an autocommit connection: its fencing token, or None when taken."""
    row = conn.execute(statement, {
        "scope": scope, "key": key, "fp": f"fp-{key}", "lease": 30.0, "ttl": 86400.0, "request": request,
        "now": now or datetime.now(dt_timezone.utc),
    }, prepare=True).fetchone()
    return None if row is None else row[0]


def _product_claim() -> Any:
    """receipts.store.claim in this process, Django set up on first use (settings inherited)."""
    import django

    django.setup()
    from receipts import store

    def run(key: str, n: int) -> bool:
        return store.claim(PRODUCT_SCOPE, key, "bench.insert", request={"n": n}).outcome == "claimed"
    return run


def _race(pipe: Connection, conninfo: str, schema: str) -> None:
    """One racer: its own connection; runs what the pipe asks until told to stop."""
    conn = psycopg.connect(conninfo, autocommit=True)
    statements = {"single": claim_sql("_single", schema), "partitioned": claim_sql("", schema)}
    product = None
    pipe.send("ready")
    while (job := pipe.recv()) is not None:
        variant, keys, start_at, deadline = job
        if variant == "product" and product is None:
            product = _product_claim()
        time.sleep(max(0.0, start_at - time.time()))  # every racer starts at the same instant
        latencies, won = [], 0
        begun = time.time()
        for n, key in enumerate(keys):
            if time.time() > deadline:
                break
            t0 = time.perf_counter()
            if variant == "product":
                won += product(key, n)
            else:
                won += claim(conn, statements[variant], "bench", key, f'{{"n": {n}}}') is not None
            latencies.append(time.perf_counter() - t0)
        pipe.send((latencies, won, begun, time.time()))
    conn.close()


class Racers:
    """OS processes with a connection each, spawned once (nothing inherited), a job per round."""

    def __init__(self, conninfo: str, processes: int, schema: str = SCHEMA) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipes, self.procs = [], []
        for _ in range(processes):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_race, args=(theirs, conninfo, schema), daemon=True)
            proc.start()
            self.pipes.append(ours)
            self.procs.append(proc)
        for pipe in self.pipes:
            if not pipe.poll(120) or pipe.recv() != "ready":
                raise RuntimeError("a racing process did not start")

    def run(self, variant: str, keys: list[list[str]], time_limit: float) -> LoadResult:
        """Each process claims its list of keys, all from the same instant, until `time_limit`:
        the claims' latencies, and their outcomes as statuses ("won" the key, or found it "taken")."""
        start_at = time.time() + 0.3
        for pipe, mine in zip(self.pipes, keys, strict=True):
            pipe.send((variant, mine, start_at, start_at + time_limit))
        results = [pipe.recv() for pipe in self.pipes]
        result = LoadResult(variant, latencies=[x for r in results for x in r[0]],
                            elapsed=max(r[3] for r in results) - min(r[2] for r in results))
        if not result.count:
            raise RuntimeError(f"{variant}: no claim finished")
        won = sum(r[1] for r in results)
        result.statuses.update(won=won, taken=result.count - won)
        return result

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for proc in self.procs:
            proc.join(30)


# What fill_day writes in each table, beside the claim's scope and key: (columns, values of row i).
FILL = {
    "claims": ("status, fencing_token, fingerprint, lease_expires_at, expires_at, attempt_day",
               "'completed', 1, md5(i::text), NULL, %(start)s::timestamptz + interval '1 day', %(start)s::date"),
    "attempts": ("outcome, fencing_token, fingerprint, created_at",
                 "'claimed', 1, md5(i::text), %(start)s::timestamptz + (i %% 86400) * interval '1 second'"),
    "bodies": ("request, response, created_at",
               "jsonb_build_object('n', i, 'note', md5(i::text)), jsonb_build_object('status', 201, 'id', i), "
               "%(start)s::timestamptz + (i %% 86400) * interval '1 second'"),
}


def fill_day(conn: psycopg.Connection, day: date, rows: int, schema: str = SCHEMA) -> None:
    """`rows` claims of `day`, each with its attempt and body row, in both layouts."""
    params = {"start": datetime.combine(day, dt_time(), dt_timezone.utc), "rows": rows, "tag": f"{day:%Y%m%d}"}
    s = sql.Identifier(schema)
    with conn.transaction():
        for suffix in ("", "_single"):
            for table, (columns, values) in FILL.items():
                conn.execute(sql.SQL(
                    f"INSERT INTO {{s}}.{{t}} (scope, key, {columns}) "
                    f"SELECT 'retention', %(tag)s || '-' || i, {values} FROM generate_series(1, %(rows)s) AS i"
                ).format(s=s, t=sql.Identifier(table + suffix)), params)
    conn.execute(sql.SQL("ANALYZE {s}.attempts, {s}.bodies, {s}.attempts_single, {s}.bodies_single").format(s=s))


def measure_retention(conn: psycopg.Connection, day: date, rows: int, schema: str = SCHEMA) -> dict[str, float]:
    """Seconds to remove a day's attempts and bodies by DELETE (unpartitioned) and by dropping its
    partitions; and the claims' own purge, a DELETE still (they are partitioned by key)."""
    fill_day(conn, day, rows, schema)
    start = datetime.combine(day, dt_time(), dt_timezone.utc)
    s = sql.Identifier(schema)
    t0 = time.perf_counter()
    with conn.transaction():
        for table in ("attempts_single", "bodies_single"):
            conn.execute(sql.SQL("DELETE FROM {s}.{t} WHERE created_at >= %s AND created_at < %s").format(
                s=s, t=sql.Identifier(table)), [start, start + timedelta(days=1)])
    delete = time.perf_counter() - t0
    t0 = time.perf_counter()
    drop_day(conn, day, schema)
    drop = time.perf_counter() - t0
    t0 = time.perf_counter()
    with conn.transaction():
        purged = conn.execute(sql.SQL("DELETE FROM {s}.claims WHERE scope = 'retention' AND expires_at <= %s").format(
            s=s), [start + timedelta(days=1)]).rowcount
    claims = time.perf_counter() - t0
    return {"rows": rows, "delete_s": delete, "drop_s": drop, "claims_delete_s": claims, "claims_purged": purged}


def conninfo_from_django(settings_dict: dict[str, Any]) -> str:
    """A libpq connection string for Django's database settings (the racers do without Django)."""
    parts = {"dbname": settings_dict["NAME"], "user": settings_dict.get("USER"),
             "password": settings_dict.get("PASSWORD"), "host": settings_dict.get("HOST"),
             "port": settings_dict.get("PORT")}
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in parts.items() if v})

