from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html

from idemdash.core import failures
from idemdash.core.caller_text import isolated_html
from idemdash.core.masking import mask_text
from idemdash.dashboard.queries import AUDIT_VERBS

register = template.Library()


@register.filter
def masked(text: str | None) -> str:
    """An error message as a page shows it: URL userinfo masked (idemdash.core.masking)."""
    return mask_text(text or "")


@register.filter
def cause(error: str | None) -> str:
    """An error's cause in one line, what varies masked (idemdash/core/failures.py): a
    traceback reads as its exception and the frame that raised it."""
    return failures.cause(mask_text(error)) if error else ""


@register.filter
def untrusted(text: object) -> str:
    """Text a caller or operator supplied, as a page shows it inline: escaped, bidi controls
    and invisible characters shown as marks, isolated in a <bdi> (idemdash.core.caller_text).
    Last in a filter chain: it returns HTML."""
    return isolated_html(text)


@register.filter
def percent(fraction: float | None) -> str:
    """0.125 -> '12.5%': the duplicate rate as people read it (the JSON keeps the fraction)."""
    if fraction is None:
        return "–"
    text = f"{fraction * 100:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"


@register.filter
def duration(seconds: int | None) -> str:
    """3725 -> '1 h 2 min': an age as people read it (the JSON keeps the seconds)."""
    if not seconds:
        return "–"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter
def since(moment: datetime | None, now: datetime | None = None) -> str:
    """How long ago `moment` was, as `duration` says it ("45 s", "3 min", "1 h 2 min")."""
    if moment is None:
        return "–"
    seconds = int(((now or timezone.now()) - moment).total_seconds())
    return duration(seconds) if seconds > 0 else "0 s"


@register.filter
def stamp(moment: datetime | None, seconds_only: str = "") -> str:
    """'2026-11-24 06:10:09 UTC': every timestamp the dashboard shows, in the server's time
    zone (TIME_ZONE) and saying which; `|stamp:"time"` leaves the date out."""
    if moment is None:
        return "–"
    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    text = local.strftime("%H:%M:%S" if seconds_only == "time" else "%Y-%m-%d %H:%M:%S")
    return f"{text} {local.tzname() or ''}".rstrip()


@register.filter
def when(moment: datetime | None, seconds_only: str = "") -> str:
    """A `<time>` element for `stamp`, its ISO value in `datetime`."""
    if moment is None:
        return "–"
    return format_html('<time datetime="{}">{}</time>', moment.isoformat(), stamp(moment, seconds_only))


@register.filter
def due(moment: datetime | None, now: datetime | None = None) -> str:
    """When a retry is due, relative ('in 2 min', or 'due now' once past), with the absolute
    time on hover: the list's next-attempt column."""
    if moment is None:
        return "–"
    seconds = int((moment - (now or timezone.now())).total_seconds())
    text = f"in {duration(seconds)}" if seconds > 0 else "due now"
    return format_html('<time datetime="{}" title="{}">{}</time>', moment.isoformat(), stamp(moment), text)


@register.filter
def total_of(total: Any) -> str:
    """A `queries.Total` as the pager says it: '1,234'; 'more than 10,000 (about 2.3 million,
    estimated)' when the count stopped at its cap; 'about 562,000 (estimated)' when it ran
    out of time."""
    if total is None:
        return ""
    if total.exact:
        return f"{total.count:,}"
    if not total.count:
        return f"about {_rough(total.estimate)} (estimated)" if total.estimate else "too many to count"
    text = f"more than {total.count:,}"
    if total.estimate:
        text += f" (about {_rough(total.estimate)}, estimated)"
    return text


def _rough(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} million"
    return f"{round(n, -3):,}"


@register.filter
def audit_verb(action: str) -> str:
    """The verb of an action (queries.AUDIT_VERBS), or its stored name for one it does not know."""
    return AUDIT_VERBS.get(action, action)


@register.filter
def audit_status_after(entry) -> str:
    """A receipt release recorded before the release marker existed reads "failed" after;
    what it did was release the key."""
    if entry.action == "receipt.release" and entry.status_after == "failed":
        return "released"
    return entry.status_after
