"""Duplicates where nothing protects: each write request to an unprotected route is noted
(caller, route, a receipt's fingerprint, never the body), and the same fingerprint on the
route within RECEIPTS_OBSERVE_WINDOW_SECONDS is a would-be duplicate. A background thread
writes the notes in batches; a loss is logged once a minute (docs/coverage.md)."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connections, router, transaction
from django.http import HttpRequest
from django.utils import timezone
from django.utils.deprecation import MiddlewareMixin

from idemdash_client.canonical import UnstorableJSON
from receipts import coverage, keys
from receipts.conf import setting
from receipts.fingerprint import fingerprint_http
from receipts.models import ObservedRequest

log = logging.getLogger(__name__)

# Notes a process holds at most while the database does not take them; more are dropped.
BUFFER_LIMIT = 10_000
COMPLAIN_EVERY = 60.0

_lock = threading.Lock()
_pending: list[tuple[Any, ...]] = []  # rows of _COLUMNS
_flusher: threading.Thread | None = None
_complained_at = -COMPLAIN_EVERY
_stopping = threading.Event()


class ObserveMiddleware(MiddlewareMixin):
    """Notes each write to an unprotected route; goes after the authentication middleware."""

    def process_view(self, request: HttpRequest, view: Any, args: tuple, kwargs: dict) -> None:
        if coverage.takes_unprotected(view, request.method):
            try:
                request.__dict__[_SEEN] = _seen(request)
            except Exception:  # fail open: the request runs whatever the observer makes of it
                _complain("a request could not be fingerprinted", exc_info=True)
        return None

    def process_response(self, request: HttpRequest, response: Any) -> Any:
        seen = request.__dict__.pop(_SEEN, None)
        if seen is not None:
            note(request, seen)
        return response


_SEEN = "_idemdash_observed"


def _seen(request: HttpRequest) -> tuple[Any, ...]:
    """(at, method, route, the request's fingerprint or "", why it was skipped or "")."""
    route = request.resolver_match.route if request.resolver_match else request.path
    at, skipped = timezone.now(), ""
    length = request.META.get("CONTENT_LENGTH") or ""
    if not length.isdigit():
        # A chunked body would be held twice if read here.
        skipped = "" if request.META.get("HTTP_TRANSFER_ENCODING") is None else "streamed"
    elif int(length) > setting("RECEIPTS_OBSERVE_MAX_BODY_BYTES"):
        skipped = "too large"
    elif request.META.get("CONTENT_TYPE", "").startswith("multipart/"):
        skipped = "multipart"  # reading an upload here would take it from the view's upload handlers
    if skipped:
        return at, request.method, route[:255], "", skipped
    body = request.body if length.isdigit() and int(length) else b""
    content_type = request.META.get("CONTENT_TYPE", "")
    try:
        request_fp = fingerprint_http(request.method, request.get_full_path(), body, content_type)
    except UnstorableJSON:
        request_fp = fingerprint_http(request.method, request.get_full_path(), body, "application/octet-stream")
    return at, request.method, route[:255], request_fp, ""


def note(request: HttpRequest, seen: tuple[Any, ...]) -> None:
    """One request's note, buffered for the flusher; never raises into the request."""
    at, method, route, request_fp, skipped = seen
    try:
        caller = keys.known_caller(request)[:255]
    except Exception:  # fail open, as for the fingerprint
        _complain("a request's caller could not be told", exc_info=True)
        return
    fingerprint = hashlib.sha256(f"{caller}\n{request_fp}".encode()).hexdigest() if request_fp else ""
    with _lock:
        dropped = len(_pending) >= BUFFER_LIMIT
        if not dropped:
            _pending.append((method, route, caller, fingerprint, skipped, at))
            _start_flusher()
    if dropped:
        _complain(f"{BUFFER_LIMIT} notes wait for the database already; a request's note was dropped")


_COLUMNS = ("method", "route", "caller", "fingerprint", "skipped", "at")


def flush() -> int:
    """Write the buffered notes in one batch; how many were written (the flusher's one pass)."""
    with _lock:
        batch = _pending[:]
        _pending.clear()
    if not batch:
        return 0
    connection = connections[router.db_for_write(ObservedRequest)]
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            _insert(connection, cursor, batch)
    except DatabaseError as exc:
        _complain(f"{len(batch)} notes of unprotected requests were lost: {' '.join(str(exc).split())[:200]}")
        return 0
    return len(batch)


def _insert(connection: Any, cursor: Any, batch: list[tuple[Any, ...]]) -> None:
    """The rows in one statement: COPY under psycopg 3 (6 µs a row, an INSERT 20 to 35), else executemany."""
    quote = connection.ops.quote_name
    table, columns = quote(ObservedRequest._meta.db_table), ", ".join(map(quote, _COLUMNS))
    if hasattr(cursor.cursor, "copy"):
        with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for row in batch:
                copy.write_row(row)
        return
    adapt = connection.ops.adapt_datetimefield_value
    cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(_COLUMNS))})",
                       [(*row[:5], adapt(row[5])) for row in batch])


def _start_flusher() -> None:
    global _flusher
    if _flusher is not None and _flusher.is_alive():  # under _lock; the usual case, and the cheap look
        return
    every = setting("RECEIPTS_OBSERVE_FLUSH_SECONDS")
    if every:
        _flusher = threading.Thread(target=_flush_forever, args=(every,), name="observe-flusher", daemon=True)
        _flusher.start()


def _flush_forever(every: float) -> None:
    while not _stopping.wait(every):
        if not flush():
            connections.close_all()  # nothing written: no connection held for the observer
    connections.close_all()


def stop_flusher() -> None:
    """End the flusher (before a test database is dropped); the next note starts another."""
    global _flusher
    with _lock:
        flusher, _flusher = _flusher, None
    if flusher is not None:
        _stopping.set()
        flusher.join(10)
        _stopping.clear()


def _complain(message: str, **kwargs: Any) -> None:
    global _complained_at
    now = time.monotonic()
    if now - _complained_at >= COMPLAIN_EVERY:
        _complained_at = now
        log.warning("observer of unprotected routes: %s", message, **kwargs)


def due_notes(now: datetime) -> Any:
    """The notes past RECEIPTS_OBSERVE_RETENTION_HOURS, for the purge."""
    return ObservedRequest.objects.filter(at__lt=now - timedelta(hours=setting("RECEIPTS_OBSERVE_RETENTION_HOURS")))

