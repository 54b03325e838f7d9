"""Pausing sending: for one action (`http.post`) or one destination host (`api.example.com`).

A pause is a row (models.OutboxPause). While it exists the drain claims none of the messages
it covers: the claim itself leaves them out in SQL (`claimable`), on every database, so no
drainer in any process sends them, whatever its batch or its task. New messages are still
enqueued and wait. A message already claimed when the pause lands finishes its attempt: the
pause stops claims, it does not cut a send in flight."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, Min, OuterRef, Q, QuerySet
from django.utils import timezone

from idemdash.core import audit
from receipts.outbox.actions import ACTION_RE, registered
from receipts.outbox.fence import allowed_hosts
from receipts.outbox.models import OutboxMessage, OutboxPause

log = logging.getLogger(__name__)

Kind = OutboxPause.Kind
WAITING = (OutboxMessage.Status.PENDING, OutboxMessage.Status.RETRY)
DRAIN_TASK = "receipts.outbox.tasks.drain"

# A DNS name or an IPv4 address, or an IPv6 one as urlsplit gives it (no brackets).
HOST_RE = re.compile(r"^[a-z0-9.\-:]{1,253}$")

# The message column each kind of pause matches.
COLUMN = {Kind.ACTION: "action", Kind.HOST: "destination_host"}


class InvalidPause(ValueError):
    """Not something that can be paused: an unknown kind, or a target that is not a name."""


def normalise(kind: str, target: str) -> tuple[str, str]:
    """The kind and the target as stored, or InvalidPause: a host is lower case, as enqueue
    writes it; an action is exact."""
    if kind not in COLUMN:
        raise InvalidPause(f"A pause is for an action or a host, not {kind!r}.")
    target = (target or "").strip()
    if kind == Kind.HOST:
        target = target.lower().strip("[]")
        if not HOST_RE.fullmatch(target):
            raise InvalidPause("A host is a name or address such as api.example.com (no scheme, path or port).")
    elif not ACTION_RE.fullmatch(target):
        raise InvalidPause("An action is 1 to 100 characters of letters, digits and . _ : -")
    return kind, target


# How far back a host counts as one messages go to, for `known_targets`: the newest messages.
RECENT_MESSAGES = 10_000
LISTED = 20  # known targets a refusal lists


def known_targets(kind: str) -> list[str]:
    """What can be paused of `kind`: the actions registered here, or the hosts messages go to
    (those of the waiting messages and of the newest RECENT_MESSAGES) and the ones
    OUTBOX_HTTP_ALLOWED_HOSTS lists. A pause of anything else holds nothing back (a typo such
    as `http.psot` would look paused, with 0 waiting)."""
    if kind == Kind.ACTION:
        return sorted(registered())
    hosts = set(allowed_hosts())
    hosts |= set(OutboxMessage.objects.filter(status__in=WAITING).exclude(destination_host="")
                 .values_list("destination_host", flat=True).distinct())
    newest = OutboxMessage.objects.order_by("-id").values_list("destination_host", flat=True)[:RECENT_MESSAGES]
    return sorted(hosts | {host for host in newest if host})


def claimable() -> Q:
    """Messages no pause covers, as one condition in the claim's own statement."""
    paused = OutboxPause.objects.filter
    return ~Exists(paused(kind=Kind.ACTION, target=OuterRef("action"))) & ~Exists(
        paused(kind=Kind.HOST, target=OuterRef("destination_host"))
    )


def covered(pause: OutboxPause) -> QuerySet:
    """The messages the pause covers, whatever their status."""
    return OutboxMessage.objects.filter(**{COLUMN[pause.kind]: pause.target})


def pause(kind: str, target: str, *, actor: str, user: Any = None, note: str = "") -> bool:
    """Pause sending; False (and no audit entry) when it was paused already. The unique
    (kind, target) insert settles it, so two operators (or a double click) pausing at once
    write one row and one entry."""
    kind, target = normalise(kind, target)
    known = known_targets(kind)
    if target not in known:
        what = "registered action" if kind == Kind.ACTION else "host the outbox sends to"
        listed = ", ".join(known[:LISTED]) + (f" and {len(known) - LISTED} more" if len(known) > LISTED else "")
        raise InvalidPause(f"{target} is not a {what}. " + (f"These are: {listed}." if known else "There is none yet."))
    note = audit.cut(note)
    try:
        with transaction.atomic():
            row = OutboxPause.objects.create(
                kind=kind, target=target, note=note, paused_by=actor[:255], paused_at=timezone.now()
            )
            audit.record(actor, "outbox_pause.pause", row, "sending", "paused",
                         f"{row.get_kind_display()} {target}" + (f": {note}" if note else ""), user=user)
    except IntegrityError:
        return False
    return True


def resume(kind: str, target: str, *, actor: str, user: Any = None, note: str = "") -> bool:
    """Resume sending and ask the worker to drain the backlog at once rather than at the next
    scheduled drain; False (and no audit entry) when it was not paused, settled by the
    conditional DELETE."""
    kind, target = normalise(kind, target)
    with transaction.atomic():
        row = OutboxPause.objects.filter(kind=kind, target=target).first()
        # The DELETE is the compare-and-set: of two resumes, one deletes the row.
        if row is None or OutboxPause.objects.filter(pk=row.pk).delete()[0] != 1:
            return False
        waiting = covered(row).filter(status__in=WAITING).count()
        detail = f"{row.get_kind_display()} {target}: {waiting} waiting messages to send"
        note = audit.cut(note)
        audit.record(actor, "outbox_pause.resume", row, "paused", "sending", detail + (f"; {note}" if note else ""),
                     user=user)
        transaction.on_commit(drain_soon)
    return True


def drain_soon() -> None:
    """Ask the worker to drain what is due now (tasks.drain). As with send_soon, a
    failure is logged, not raised: the scheduled drain sends the backlog within a minute."""
    if not apps.is_installed("django_q"):
        return
    from django_q.tasks import async_task

    try:
        async_task(DRAIN_TASK, group="outbox")
    except Exception:
        log.warning("could not ask the worker to drain the outbox; the scheduled drain will", exc_info=True)


@dataclass(frozen=True)
class Paused:
    """A pause with its backlog: the messages it holds back that are waiting to be sent."""

    pause: OutboxPause
    waiting: int
    oldest: datetime | None


def backlog(row: OutboxPause) -> Paused:
    """The pause with how many messages it holds back and since when (one aggregate query)."""
    waiting = covered(row).filter(status__in=WAITING).aggregate(waiting=Count("id"), oldest=Min("created_at"))
    return Paused(row, waiting["waiting"], waiting["oldest"])


def paused() -> list[Paused]:
    """Every pause, oldest first, with its backlog (a handful: one query each)."""
    return [backlog(row) for row in OutboxPause.objects.order_by("paused_at", "id")]
