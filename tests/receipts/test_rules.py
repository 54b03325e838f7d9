"""receipts/rules.py: the expiry, replay and settle rules, and the two paths that apply them.

Over every combination of the fields the rules read (status, retryable, the release
marker, expiry: live, expired or permanent, the lease, the caller's fingerprint and
fencing token), including states the store never produces: the rule's three forms (SQL
fragment, Q, Python predicate) give the same answer, and a claim and a settle through
PostgreSQL's statements (receipts/pg.py) and through the ORM twin (receipts/orm.py) answer
alike and leave the same row and log lines, and a replay on PostgreSQL is the statement's
own (one statement, not the store's second look). On SQLite only the ORM path exists; the
rule's forms are still compared.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from types import ModuleType

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from receipts import orm, pg, rules, store
from receipts.models import Attempt, Receipt

SCOPE = "client:rules"
FINGERPRINT, OTHER = "a" * 64, "b" * 64

COMBINATIONS = list(
    itertools.product(
        ["processing", "completed", "failed"],
        ["retryable", "burned"],
        ["unmarked", "released"],
        ["live", "expired", "permanent"],
        ["lease-live", "lease-ended"],
        ["same-fingerprint", "other-fingerprint"],
        ["own-token", "stale-token"],
    )
)


def paths() -> list[ModuleType]:
    return [pg, orm] if connection.vendor == "postgresql" else [orm]


def make(key: str, status: str, retryable: str, marker: str, expiry: str, lease: str) -> Receipt:
    now = timezone.now()
    hour = timedelta(hours=1)
    return Receipt.objects.create(
        scope=SCOPE,
        key=key,
        operation="email.send",
        fingerprint=FINGERPRINT,
        status=status,
        retryable=retryable == "retryable",
        error="it failed" if status == "failed" else "",
        response_status=201 if status != "processing" else None,
        response_body="kept" if status != "processing" else "",
        fencing_token=5,
        attempts=2,
        lease_expires_at=now + (hour if lease == "lease-live" else -hour),
        created_at=now - 2 * hour,
        updated_at=now - hour,
        expires_at=None if expiry == "permanent" else now + (hour if expiry == "live" else -hour),
        released_at=now - hour if marker == "released" else None,
        released_by="otto" if marker == "released" else "",
        release_reason="stuck" if marker == "released" else "",
    )


def state(key: str) -> tuple:
    """A receipt as both paths must leave it (timestamps aside), with its log's outcomes."""
    r = Receipt.objects.get(scope=SCOPE, key=key)
    log = list(Attempt.objects.filter(scope=SCOPE, key=key).order_by("id").values_list("outcome", "fencing_token", "detail"))
    return (r.status, r.retryable, r.fencing_token, r.attempts, r.error, r.response_body, r.released_at is None,
            r.released_by, r.lease_expires_at is None, log)


def matches_in_sql(rule: rules.Rule, receipt: Receipt, **params) -> bool:
    adapted = {
        name: connection.ops.adapt_datetimefield_value(value) if name == "now" else value for name, value in params.items()
    }
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM {Receipt._meta.db_table} WHERE id = %s AND {rule.sql}",
            [receipt.pk, *rule.arguments(**adapted)],
        )
        return cursor.fetchone()[0] == 1


def agree(rule: rules.Rule, receipt: Receipt, **params) -> bool:
    in_python = rule.holds(receipt, **params)
    in_orm = Receipt.objects.filter(rule.q(**params), pk=receipt.pk).exists()
    assert in_python == in_orm == matches_in_sql(rule, receipt, **params), f"{rule.sql} disagrees with itself"
    return in_python


@pytest.mark.django_db
@pytest.mark.parametrize(("status", "retryable", "marker", "expiry", "lease", "fingerprint", "token"), COMBINATIONS,
                         ids=["-".join(c) for c in COMBINATIONS])
def test_both_paths_claim_and_settle_alike(monkeypatch, status, retryable, marker, expiry, lease, fingerprint, token):
    shape = (status, retryable, marker, expiry, lease)
    caller_fp = FINGERPRINT if fingerprint == "same-fingerprint" else OTHER
    caller_token = 5 if token == "own-token" else 4
    sample = make("sample", *shape)
    replays = agree(rules.REPLAY, sample, fingerprint=caller_fp, now=timezone.now())
    settles = agree(rules.SETTLE, sample, token=caller_token)
    now = timezone.now()
    live = agree(rules.LIVE, sample, now=now)
    assert agree(rules.EXPIRED, sample, now=now) == (not live) == (expiry == "expired")
    lapsed = agree(rules.LAPSED, sample, now=timezone.now())
    assert lapsed == (status == "processing" and lease == "lease-ended")

    claims, settled = [], []
    for path in paths():
        monkeypatch.setattr(store, "path", lambda alias="default", path=path: path)
        key = f"claim-{path.__name__}"
        make(key, *shape)
        with CaptureQueriesContext(connection) as queries:
            result = store.claim(SCOPE, key, "email.send", fingerprint=caller_fp)
        claims.append((result.outcome, result.token, state(key)))
        if path is pg and result.outcome == "replayed":
            assert len(queries) == 1, "the statement's own replay rule did not replay it"

        key = f"settle-{path.__name__}"
        make(key, *shape)
        try:
            store.complete(store.Held(SCOPE, key, caller_token), response_status=200, body="done")
            refused = False
        except store.StaleToken:
            refused = True
        settled.append((refused, state(key)))

    assert all(claim == claims[0] for claim in claims), claims
    assert all(settle == settled[0] for settle in settled), settled

    outcome, _, (_, _, _, _, _, _, unmarked_after, *_) = claims[0]
    assert (outcome == "replayed") == replays
    assert settled[0][0] == (not settles)
    if status == "failed" and marker == "released":
        # A released receipt is never replayed, and the claim that takes it clears the marker.
        assert outcome != "replayed"
        if outcome in store.OWNING_OUTCOMES:
            assert unmarked_after


HELD = list(itertools.product(["processing", "completed", "failed"], ["unmarked", "released"], ["lease-live", "lease-ended"]))


@pytest.mark.django_db
@pytest.mark.parametrize(("status", "marker", "lease"), HELD, ids=["-".join(c) for c in HELD])
def test_both_paths_hold_a_lapsed_receipt_alike(monkeypatch, settings, status, marker, lease):
    """Under after_crash "hold", neither path takes a lapsed receipt over: PostgreSQL's
    statement hands it to the store, which answers outcome_unknown, as the ORM path does."""
    settings.RECEIPTS_OPERATIONS = {"email.send": {"after_crash": "hold"}}
    claims = []
    for path in paths():
        monkeypatch.setattr(store, "path", lambda alias="default", path=path: path)
        key = f"held-{path.__name__}"
        make(key, status, "retryable", marker, "live", lease)
        result = store.claim(SCOPE, key, "email.send", fingerprint=FINGERPRINT)
        claims.append((result.outcome, result.token, state(key)))
    assert all(claim == claims[0] for claim in claims), claims
    held = status == "processing" and lease == "lease-ended"
    assert (claims[0][0] == "outcome_unknown") == held
    if held:
        assert claims[0][1] is None and claims[0][2][2] == 5  # nobody took it over: the token is unchanged
