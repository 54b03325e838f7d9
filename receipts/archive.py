"""The archive of financial receipts, copied into ArchivedReceipt in the transaction that
purges them: by the generic batch (`archive_financial_receipts`) or PostgreSQL's one
statement (receipts/pg.py, with `insert_into_archive`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connections
from django.db.models import QuerySet

from receipts.conf import policy_for
from receipts.models import ArchivedReceipt


def financial(operations: Iterable[str]) -> list[str]:
    """Which of `operations` are financial: their receipts are archived before they are deleted."""
    return sorted({op for op in operations if policy_for(op).financial})


def insert_into_archive(db) -> str:
    """`INSERT INTO` the archive's columns (id, COPIED, archived_at), for a SELECT of that shape."""
    opts = ArchivedReceipt._meta
    columns = ["original_id", *(opts.get_field(name).column for name in ArchivedReceipt.COPIED), "archived_at"]
    return f"INSERT INTO {db.ops.quote_name(opts.db_table)} ({', '.join(map(db.ops.quote_name, columns))})"


def archive_financial_receipts(batch: QuerySet, now: datetime) -> int:
    """Copy the financial receipts of a batch into ArchivedReceipt, by one INSERT ... SELECT."""
    operations = financial(batch.order_by().values_list("operation", flat=True).distinct())
    if not operations:
        return 0
    rows = batch.filter(operation__in=operations).order_by().values_list("pk", *ArchivedReceipt.COPIED)
    db = connections[rows.db]
    select, params = rows.query.get_compiler(using=rows.db).as_sql()
    # The ORM has no INSERT ... SELECT: only the INSERT around the ORM's SELECT is written here.
    sql = f"{insert_into_archive(db)} SELECT copied.*, %s FROM ({select}) copied"
    with db.cursor() as cursor:
        cursor.execute(sql, [db.ops.adapt_datetimefield_value(now), *params])
        return cursor.rowcount
