"""Moved to receipts/pg.py (claim_or_replay, settle) and idemdash/core/pg.py (cursor,
insert_unless_exists, usable); kept for one release. The store now calls whichever of
receipts/pg.py and receipts/orm.py store.path() chose for the database."""

from idemdash.core.pg import cursor, insert_unless_exists, usable  # noqa: F401
from receipts.pg import claim_or_replay, settle  # noqa: F401
