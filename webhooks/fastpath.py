"""Moved to webhooks/pg.py (store, which now also decides the event's task and returns a
Stored) and idemdash/core/pg.py (usable, cursor, insert_unless_exists); kept for one release."""

from idemdash.core.pg import cursor, insert_unless_exists, usable  # noqa: F401
from webhooks.pg import store  # noqa: F401
