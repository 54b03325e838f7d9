"""Duplicates where nothing protects: each write request to a route no receipt protects is
noted (caller, route, a fingerprint of method, path and canonical body, as a receipt's), and
the same fingerprint on the route again within RECEIPTS_OBSERVE_WINDOW_SECONDS counts as a
would-be duplicate. The body is never kept and the response never changed. Notes wait in the
process and a background thread writes them in batches; when the database refuses them the
requests have run anyway, and the loss is logged once a minute (docs/coverage.md)."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connections
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
_pending: list[ObservedRequest] = []
_flusher: threading.Thread | None = None
_complained_at = -COMPLAIN_EVERY
_stopping = threading.Event()


class ObserveMiddleware(MiddlewareMixin):
    """Notes each write request to an unprotected route (`coverage.takes_unprotected`); put it
    after the authentication middleware, so that the caller is known."""

    def process_view(self, request: HttpRequest, view: Any, args: tuple, kwargs: dict) -> None:
        if coverage.takes_unprotected(view, request.method):
            note(request)
        return None


def note(request: HttpRequest) -> None:
    """One request's note, buffered for the flusher; never raises into the request."""
    try:
        observed = _observed(request)
    except Exception:  # fail open: the request runs whatever the observer makes of it
        _complain("a request could not be fingerprinted", exc_info=True)
        return
    with _lock:
        if len(_pending) >= BUFFER_LIMIT:
            dropped = True
        else:
            dropped = False
            _pending.append(observed)
            _start_flusher()
    if dropped:
        _complain(f"{BUFFER_LIMIT} notes wait for the database already; a request's note was dropped")


def _observed(request: HttpRequest) -> ObservedRequest:
    route = request.resolver_match.route if request.resolver_match else request.path
    caller = keys.default_scope(request)
    observed = ObservedRequest(method=request.method, route=route[:255], caller=caller[:255], at=timezone.now())
    length = request.META.get("CONTENT_LENGTH") or ""
    if not length.isdigit():
        # No length: a chunked (streamed) body, or none. Reading a stream here would hold it twice.
        observed.skipped = "" if request.META.get("HTTP_TRANSFER_ENCODING") is None else "streamed"
    elif int(length) > setting("RECEIPTS_OBSERVE_MAX_BODY_BYTES"):
        observed.skipped = "too large"
    elif request.META.get("CONTENT_TYPE", "").startswith("multipart/"):
        # Reading an upload here would end the view's say over its upload handlers.
        observed.skipped = "multipart"
    if observed.skipped:
        return observed
    body = request.body if length.isdigit() and int(length) else b""
    content_type = request.META.get("CONTENT_TYPE", "")
    try:
        request_fp = fingerprint_http(request.method, request.get_full_path(), body, content_type)
    except UnstorableJSON:
        request_fp = fingerprint_http(request.method, request.get_full_path(), body, "application/octet-stream")
    observed.fingerprint = hashlib.sha256(f"{caller}\n{request_fp}".encode()).hexdigest()
    return observed


def flush() -> int:
    """Write the buffered notes in one batch; how many were written (the flusher's one pass)."""
    with _lock:
        batch = _pending[:]
        _pending.clear()
    if not batch:
        return 0
    try:
        ObservedRequest.objects.bulk_create(batch)
    except DatabaseError as exc:
        _complain(f"{len(batch)} notes of unprotected requests were lost: {' '.join(str(exc).split())[:200]}")
        return 0
    return len(batch)


def _start_flusher() -> None:
    global _flusher
    every = setting("RECEIPTS_OBSERVE_FLUSH_SECONDS")
    if every and (_flusher is None or not _flusher.is_alive()):  # under _lock
        _flusher = threading.Thread(target=_flush_forever, args=(every,), name="observe-flusher", daemon=True)
        _flusher.start()


def _flush_forever(every: float) -> None:
    while not _stopping.wait(every):
        if not flush():
            connections.close_all()  # nothing written: no connection held for the observer
    connections.close_all()


def stop_flusher() -> None:
    """End the flusher (before a test database is dropped: receipts/pytest_plugin.py); the
    next note starts another."""
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

