"""The partitioned prototype of scenario 13 (idemdash/devtools/bench/partitioned.py) on real
PostgreSQL: one claim per key under threads and OS processes racing, and retention by
dropping a day's partitions."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone as dt_timezone

import psycopg
import pytest
from django.db import connection

from idemdash.devtools.bench import partitioned

pytestmark = pytest.mark.postgres

SCHEMA = "past_one_table_test"


@pytest.fixture
def conninfo(db) -> str:
    info = partitioned.conninfo_from_django(connection.settings_dict)
    with psycopg.connect(info, autocommit=True) as conn:
        partitioned.create(conn, datetime.now(dt_timezone.utc).date(), SCHEMA)
    yield info
    with psycopg.connect(info, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")


def counts(conninfo: str, scope: str = "bench") -> tuple[int, int, int, int]:
    """(claims, distinct claimed keys, attempt rows, body rows) of `scope`."""
    with psycopg.connect(conninfo) as conn:
        return conn.execute(f"""
            SELECT (SELECT count(*) FROM {SCHEMA}.claims WHERE scope = %(s)s),
                   (SELECT count(DISTINCT key) FROM {SCHEMA}.claims WHERE scope = %(s)s),
                   (SELECT count(*) FROM {SCHEMA}.attempts WHERE scope = %(s)s),
                   (SELECT count(*) FROM {SCHEMA}.bodies WHERE scope = %(s)s)""", {"s": scope}).fetchone()


def test_the_claim_table_is_hash_partitioned_by_its_primary_key(conninfo):
    with psycopg.connect(conninfo) as conn:
        parts = conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = %s::regclass",
                             [f"{SCHEMA}.claims"]).fetchone()[0]
        strategy = conn.execute("SELECT partstrat FROM pg_partitioned_table WHERE partrelid = %s::regclass",
                                [f"{SCHEMA}.claims"]).fetchone()[0]
    assert parts == partitioned.CLAIM_PARTITIONS and strategy == "h"


@pytest.mark.slow
def test_processes_racing_on_the_same_keys_claim_each_exactly_once(conninfo):
    keys = [f"race-{n}" for n in range(200)]
    racers = partitioned.Racers(conninfo, 4, SCHEMA)
    try:
        # Every process claims every key, in a different order, from the same instant.
        race = racers.run("partitioned", [keys, keys[::-1], keys[100:] + keys[:100], keys[50:] + keys[:50]], 60)
    finally:
        racers.close()
    assert race.count == 4 * len(keys)
    assert race.statuses == {"won": len(keys), "taken": 3 * len(keys)}
    assert counts(conninfo) == (len(keys),) * 4


def test_threads_racing_on_one_key_get_one_fencing_token(conninfo):
    statement = partitioned.claim_sql("", SCHEMA)
    barrier, tokens = threading.Barrier(8), []

    def racer() -> None:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            barrier.wait()
            tokens.append(partitioned.claim(conn, statement, "bench", "one-key", "{}"))

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(tokens, key=lambda t: t is None) == [1] + [None] * 7
    assert counts(conninfo) == (1, 1, 1, 1)


def test_a_day_of_attempts_and_bodies_is_dropped_whole_and_its_claims_purged(conninfo):
    oldest = partitioned.days_back(datetime.now(dt_timezone.utc).date())[-1]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        result = partitioned.measure_retention(conn, oldest, 300, SCHEMA)
        left = conn.execute(f"""
            SELECT (SELECT count(*) FROM {SCHEMA}.attempts_single), (SELECT count(*) FROM {SCHEMA}.bodies_single),
                   (SELECT count(*) FROM {SCHEMA}.attempts), (SELECT count(*) FROM {SCHEMA}.claims),
                   to_regclass(%s)""", [f"{SCHEMA}.{partitioned.day_partition('attempts', oldest)}"]).fetchone()
        # Claims still land after the drop: today's partitions are untouched.
        token = partitioned.claim(conn, partitioned.claim_sql("", SCHEMA), "bench", "after-drop", "{}",
                                  now=datetime.now(dt_timezone.utc) + timedelta(seconds=1))
    assert left == (0, 0, 0, 0, None)
    assert result["claims_purged"] == 300 and result["delete_s"] > 0 and result["drop_s"] > 0
    assert token == 1
