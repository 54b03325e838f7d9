"""Search and trace by business id: everything the log holds about one order, payment intent,
charge or event id, whichever key it came under (docs/dashboard.md, "Pages").

An id matches a key when it is the whole key or one of its parts between separators
(`KEY_SEPARATORS`), a JSON document (a stored request, response or payload) when it is one of
its string values, whole, at any depth (or, for an id of digits, one of its integers), and
any unit that was given it as a reference (`_by_reference`). Substrings are not matched: an
operator searches for an id, not for text. Each kind is found by one function of SOURCES;
`search` merges their Hits by kind."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import OperationalError, connection
from django.db.models import BooleanField, Model, QuerySet
from django.db.models.expressions import RawSQL
from django.urls import reverse

from idemdash.core.reference_rows import referring
from idemdash.dashboard.queries import latest, statement_budget
from idemdash.core.models import AuditEntry
from receipts.models import Attempt, Receipt
from receipts.outbox.models import OutboxAttempt, OutboxMessage
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEvent

# The longest id searched for: keys and event ids are at most 255 characters, dedupe keys 512.
MAX_LENGTH = 512
# Units shown per kind; past it the page says there are more.
LIMIT = 50
# Rows of one kind's history on a trace (a retry storm can leave thousands).
TRACE_LIMIT = 500
# What a search may take on PostgreSQL before it is stopped, per query.
BUDGET_MS = 2000
# On PostgreSQL an id held by more rows than this (a currency, a status) is read from a
# random sample of about this many of its GIN entries (gin_fuzzy_search_limit): the page
# shows 50 of them anyway, and collecting all 2 M events that hold "eur" took a second.
# An id held by fewer rows (any business id) is read whole.
GIN_SAMPLE = 2000

# The parts of a key: what the migration's `regexp_split_to_array(k, '[-:/.|#,;=\s]+')` splits on.
KEY_SEPARATORS = re.compile(r"[-:/.|#,;=\s]+")
INTEGER = re.compile(r"-?(0|[1-9][0-9]{0,17})")


class BadQuery(ValueError):
    """Search text that cannot be an id: the message says why, in the operator's words."""


@dataclass(frozen=True)
class Term:
    """One id to look for: the text, and the integer it also is, if it is one."""

    text: str

    @property
    def integer(self) -> int | None:
        return int(self.text) if INTEGER.fullmatch(self.text) else None

    @property
    def is_key_part(self) -> bool:
        """Whether it can be one part of a key (it has no separator in it)."""
        return KEY_SEPARATORS.search(self.text) is None


def parse(raw: str | None) -> Term | None:
    """The id in the search box: None when it is empty; BadQuery when it cannot be one."""
    text = (raw or "").strip()
    if not text:
        return None
    if len(text) > MAX_LENGTH:
        raise BadQuery(f"That is {len(text):,} characters long; the longest id searched for is {MAX_LENGTH}. "
                       "Paste the id alone: an order, payment intent, charge or event id, or a key.")
    if "\x00" in text:
        raise BadQuery("The search text contains a NUL character, which no stored id can contain.")
    return Term(text)


# --- What a search finds ------------------------------------------------------------------------


@dataclass
class Hit:
    """A unit found, and where the id was found in it (e.g. "key", "payload")."""

    kind: str
    obj: Any
    found_in: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Kind:
    """A kind of unit searched, and its columns searched: its keys, its JSON document and its
    stored response. These are the migration's index expressions, which the PostgreSQL
    query must repeat exactly."""

    name: str  # "receipt", as the dashboard's URL names say
    plural: str
    model: type[Model]
    time_field: str
    label: Callable[[Any], str]
    keys: tuple[str, ...]
    doc: str
    body: str | None = None

    @property
    def documents(self) -> tuple[str, ...]:
        return (self.doc, self.body) if self.body else (self.doc,)

    def terms_sql(self, table: str) -> str:
        keys = ", ".join(f'"{table}"."{k}"' for k in self.keys)
        doc = f'"{table}"."{self.doc}"'
        body = f'"{table}"."{self.body}"' if self.body else "NULL::text"
        return f"idemdash_search_terms(ARRAY[{keys}]::text[], {doc}, {body})"


KINDS: dict[str, Kind] = {
    k.name: k for k in (
        Kind("receipt", "Receipts", Receipt, "created_at", lambda r: r.key, ("key",), "request", "response_body"),
        Kind("event", "Webhook events", WebhookEvent, "received_at", lambda e: e.provider_event_id or e.dedupe_key,
             ("provider_event_id", "dedupe_key"), "payload"),
        Kind("message", "Outbox messages", OutboxMessage, "created_at", lambda m: m.key, ("key",), "payload"),
    )
}


@dataclass
class Group:
    kind: Kind
    hits: list[Hit]
    more: bool  # more matched than LIMIT


@dataclass
class Results:
    term: Term
    groups: list[Group]
    timed_out: list[str] = field(default_factory=list)  # kinds whose search ran out of time

    @property
    def total(self) -> int:
        return sum(len(g.hits) for g in self.groups)


# Separators turned into spaces, for SQLite's key parts (it has no regular expressions).
_SQLITE_SEPARATORS = "-:/.|#,;=\t\n\r"


def _sqlite_json_has(column: str, term: Term, params: list[Any]) -> str:
    """SQL true when the JSON text in `column` holds the term as a whole string value (or
    integer), at any depth; a column that is not a JSON object or array holds nothing."""
    clauses = ["(j.type = 'text' AND j.atom = %s)"]
    params.append(term.text)
    if term.integer is not None:
        clauses.append("(j.type = 'integer' AND j.atom = %s)")
        params.append(term.integer)
    return (f"CASE WHEN json_valid({column}) AND substr(ltrim({column}, ' ' || char(9, 10, 13)), 1, 1) IN ('{{', '[') "
            f"THEN EXISTS (SELECT 1 FROM json_tree({column}) AS j WHERE {' OR '.join(clauses)}) ELSE 0 END")


def _sqlite_key_part(column: str, term: Term, params: list[Any]) -> str:
    normalised = column
    for sep in _SQLITE_SEPARATORS:
        literal = "char(%d)" % ord(sep) if not sep.isprintable() else "'" + sep.replace("'", "''") + "'"
        normalised = f"replace({normalised}, {literal}, ' ')"
    params.append(f" {term.text} ")
    return f"instr(' ' || {normalised} || ' ', %s) > 0"


def _mysql_key_part(column: str, term: Term, params: list[Any]) -> str:
    params.append(f" {term.text} ")
    return f"LOCATE(%s, CONCAT(' ', REGEXP_REPLACE({column}, '[-:/.|#,;=[:space:]]+', ' '), ' ')) > 0"


def _mysql_json_has(column: str, term: Term, params: list[Any]) -> str:
    """String values by JSON_SEARCH, whose LIKE wildcards are escaped (MariaDB's matches
    integers too, MySQL's does not)."""
    params.append(term.text.replace("!", "!!").replace("%", "!%").replace("_", "!_"))
    return (f"CASE WHEN JSON_VALID({column}) AND LEFT(TRIM({column}), 1) IN ('{{', '[') "
            f"THEN JSON_SEARCH({column}, 'one', %s, '!') IS NOT NULL ELSE 0 END")


# Without PostgreSQL's index: how a column is named, and the SQL of a key part and of a
# JSON value, on SQLite and on MySQL/MariaDB.
_SCANS = {
    "sqlite": ('"{}"."{}"', _sqlite_key_part, _sqlite_json_has),
    "mysql": ("`{}`.`{}`", _mysql_key_part, _mysql_json_has),
}


def matching(kind: str, term: Term) -> QuerySet:
    """The units of `kind` the term matches (unordered: the caller limits and orders), the
    same on every database. On PostgreSQL each table has a GIN index over exactly those terms
    (the migration idemdash/dashboard/migrations/0001_initial.py: `idemdash_search_terms`), so
    a search reads a few index pages at any size, under a time budget (BUDGET_MS). SQLite reads
    each row's JSON with json_tree, and MySQL/MariaDB with JSON_SEARCH (string values;
    MariaDB's also integers, MySQL's not): correct, and slower with the size of the log."""
    spec = KINDS[kind]
    table = spec.model._meta.db_table
    params: list[Any] = []
    if connection.vendor == "postgresql":
        terms = spec.terms_sql(table)
        clauses = [f"{terms} @> %s::jsonb"]
        params.append(json.dumps([term.text]))
        if term.integer is not None:
            clauses.append(f"{terms} @> %s::jsonb")
            params.append(json.dumps([term.integer]))
    else:
        quoted, key_part, json_has = _SCANS["sqlite" if connection.vendor == "sqlite" else "mysql"]
        clauses = []
        for key in spec.keys:
            column = quoted.format(table, key)
            clauses.append(f"{column} = %s")
            params.append(term.text)
            if term.is_key_part:
                clauses.append(key_part(column, term, params))
        clauses += [json_has(quoted.format(table, name), term, params) for name in spec.documents]
    condition = RawSQL("(" + " OR ".join(clauses) + ")", params, output_field=BooleanField())
    return spec.model.objects.filter(condition)


def _found_in(kind: str, obj: Any, term: Term) -> list[str]:
    """Where in `obj` the term is, for the operator (the database said that it is)."""
    spec = KINDS[kind]
    places = []
    for key in spec.keys:
        value = getattr(obj, key) or ""
        if value == term.text or term.text in KEY_SEPARATORS.split(value):
            places.append(key.replace("_", " "))
    if term_in_json(getattr(obj, spec.doc), term):
        places.append(spec.doc)
    if spec.body:
        try:
            body = json.loads(getattr(obj, spec.body) or "null")
        except ValueError:
            body = None
        if isinstance(body, (dict, list)) and term_in_json(body, term):
            places.append("response")
    return sorted(set(places), key=places.index)


def term_in_json(doc: Any, term: Term) -> bool:
    """Whether the term is one of the document's strings or numbers, at any depth (booleans
    are not numbers here)."""
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif not isinstance(value, bool) and (value == term.text or (term.integer is not None and value == term.integer)):
            return True
    return False


def _by_kind(kind: str) -> Callable[[Term, int], list[Hit]]:
    def find(term: Term, limit: int) -> list[Hit]:
        qs = matching(kind, term)
        if kind == "event":
            qs = qs.select_related("endpoint")
        # Any `limit` matches, then newest first: without an ORDER BY the planner reads the
        # index and stops, where "newest first" could walk the table backwards looking.
        rows = list(qs[:limit])
        rows.sort(key=lambda u: (getattr(u, KINDS[kind].time_field), u.pk), reverse=True)
        return [Hit(kind, row, _found_in(kind, row, term)) for row in rows]
    return find


def _by_reference(term: Term, limit: int) -> list[Hit]:
    """The units that were given the id as a reference (a charge id a handler referred to
    with `event.refer`, a receipt's or a message's `references`), found in "reference <its
    kind>": on each kind's reference table, an index lookup on its value (and a unique
    (owner, kind, value) one for the kinds), whatever the tables' size."""
    hits = []
    for kind in KINDS.values():
        rows = list(referring(kind.model, term.text)[:limit])
        if not rows:
            continue
        relation = kind.model._meta.get_field("references")
        owner = relation.field.attname
        named: dict[int, list[str]] = {}
        for owner_id, ref_kind in relation.related_model.objects.filter(
            value=term.text, **{f"{owner}__in": [r.pk for r in rows]}
        ).order_by("kind").values_list(owner, "kind"):
            named.setdefault(owner_id, []).append(f"reference {ref_kind}")
        hits += [Hit(kind.name, row, named.get(row.pk, ["reference"])) for row in rows]
    return hits


# How units are found: each function returns up to `limit` Hits (of any kind) for the term.
SOURCES: list[Callable[[Term, int], list[Hit]]] = [
    _by_kind("receipt"), _by_kind("event"), _by_kind("message"), _by_reference,
]


def search(term: Term, limit: int = LIMIT) -> Results:
    """Every unit the term finds, grouped by kind (receipts, events, messages), newest first."""
    found: dict[str, dict[int, Hit]] = {name: {} for name in KINDS}
    more: set[str] = set()
    timed_out: list[str] = []
    for source in SOURCES:
        try:
            with statement_budget(connection, BUDGET_MS, gin_fuzzy_search_limit=GIN_SAMPLE):
                hits = source(term, limit + 1)
        except OperationalError:  # the budget ran out
            timed_out.append(getattr(source, "__name__", "a source"))
            continue
        for hit in hits:
            known = found[hit.kind].get(hit.obj.pk)
            if known is None:
                found[hit.kind][hit.obj.pk] = hit
            else:
                known.found_in += [p for p in hit.found_in if p not in known.found_in]
        more.update(k for k, n in Counter(hit.kind for hit in hits).items() if n > limit)
    groups = []
    for name, hits in found.items():
        kind = KINDS[name]
        ordered = sorted(hits.values(), key=lambda h: (getattr(h.obj, kind.time_field), h.obj.pk), reverse=True)
        groups.append(Group(kind, ordered[:limit], more=name in more or len(ordered) > limit))
    return Results(term, groups, timed_out)


# --- The trace: everything that happened to the units, on one timeline ---------------------------


@dataclass(frozen=True)
class Entry:
    """One line of a trace: when, on which unit, what happened, and what it said."""

    at: datetime
    kind: str  # the unit's kind
    unit: str  # its label (key, event id)
    url: str
    what: str  # an operator's: the audit action (the page names it by its verb)
    detail: str = ""
    source: str = ""  # "attempt", "delivery", "processing", "send", "operator"
    actor: str = ""


@dataclass
class Trace:
    results: Results
    entries: list[Entry]
    cut: list[str]  # the histories shortened to their latest TRACE_LIMIT rows


def _latest(qs: QuerySet, order: str, cut: list[str], what: str) -> list[Any]:
    """`queries.latest` TRACE_LIMIT rows (rows of one instant keep the order they were
    written in: a claim and its completion can share a timestamp); `what` is cut if more."""
    rows, total = latest(qs, f"-{order}", "-id", limit=TRACE_LIMIT)
    if total > len(rows):
        cut.append(what)
    return rows


def trace(term: Term) -> Trace:
    """The units the term finds, and every receipt attempt, webhook delivery, processing
    attempt, outbox send and operator action on them, oldest first."""
    results = search(term)
    units = {g.kind.name: {h.obj.pk: h.obj for h in g.hits} for g in results.groups}
    receipts, events, messages = units["receipt"], units["event"], units["message"]
    # (`__in` lists below: the dicts' keys are the units' ids.)
    entries: list[Entry] = []
    cut: list[str] = []

    def url(kind: str, pk: int) -> str:
        return reverse(f"dashboard:{kind}", args=[pk])

    for a in _latest(Attempt.objects.filter(receipt_id__in=list(receipts)), "created_at", cut, "receipt attempts"):
        r = receipts[a.receipt_id]
        entries.append(Entry(a.created_at, "receipt", r.key, url("receipt", r.pk), a.outcome,
                             a.detail, "attempt", a.actor))
    for d in _latest(WebhookDelivery.objects.filter(event_id__in=list(events)), "received_at", cut, "webhook deliveries"):
        e = events[d.event_id]
        what = "redelivered" if d.duplicate else "received"
        entries.append(Entry(d.received_at, "event", KINDS["event"].label(e), url("event", e.pk), what,
                             "" if d.payload_matches else "payload differed from the stored one", "delivery"))
    for w in _latest(WebhookAttempt.objects.filter(event_id__in=list(events)), "finished_at", cut, "processing attempts"):
        e = events[w.event_id]
        entries.append(Entry(w.finished_at, "event", KINDS["event"].label(e), url("event", e.pk),
                             f"processing #{w.number}: {w.outcome}", w.error, "processing"))
    for m in messages.values():
        entries.append(Entry(m.created_at, "message", m.key, url("message", m.pk), f"enqueued ({m.action})", "", "send"))
    for o in _latest(OutboxAttempt.objects.filter(message_id__in=list(messages)), "created_at", cut, "outbox attempts"):
        m = messages[o.message_id]
        code = f"HTTP {o.status_code}" if o.status_code and f"HTTP {o.status_code}" not in o.error else ""
        entries.append(Entry(o.created_at, "message", m.key, url("message", m.pk),
                             f"send #{o.number}: {o.outcome}", " · ".join(filter(None, [code, o.error])), "send"))
    audited = {"receipts.receipt": ("receipt", receipts), "webhooks.webhookevent": ("event", events),
               "outbox.outboxmessage": ("message", messages)}
    for object_type, (kind, rows) in audited.items():
        if not rows:
            continue
        entries_qs = AuditEntry.objects.filter(object_type=object_type, object_id__in=[str(pk) for pk in rows])
        for a in _latest(entries_qs, "created_at", cut, "operator actions"):
            obj = rows[int(a.object_id)]
            change = f"{a.status_before} → {a.status_after}" if a.status_before or a.status_after else ""
            entries.append(Entry(a.created_at, kind, KINDS[kind].label(obj), url(kind, obj.pk), a.action,
                                 " · ".join(filter(None, [change, a.detail])), "operator", a.actor))
    # Oldest first; at one instant, the order things happen in: a delivery before its
    # processing, an attempt before the operator's action on it.
    rank = {"delivery": 0, "attempt": 1, "send": 1, "processing": 2, "operator": 3}
    entries.sort(key=lambda e: (e.at, rank.get(e.source, 1)))
    return Trace(results, entries, sorted(set(cut)))
