# Receipt compaction (receipts/compaction.py): the marker column, and the partial index of
# completed receipts not yet compacted that a compaction run walks by operation and age.
#
# The column is nullable with no default value to write, so adding it rewrites no row. On
# PostgreSQL the index is built CONCURRENTLY (the migration is not atomic): a host upgrading
# with millions of receipts keeps taking claims while it builds, and a build that failed
# half-way (an INVALID index, which IF NOT EXISTS would keep) is dropped and built again.
# Other databases build it as Django does.

from django.db import migrations, models

from idemdash.core.pg import build_index_concurrently

INDEX = models.Index(
    condition=models.Q(("compacted_at", None), ("status", "completed")),
    fields=["operation", "created_at"],
    name="receipt_compactable",
)


def create(apps, schema_editor) -> None:
    receipt = apps.get_model("receipts", "Receipt")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.add_index(receipt, INDEX)
        return
    build_index_concurrently(schema_editor, INDEX.name, str(INDEX.create_sql(receipt, schema_editor)))


def drop(apps, schema_editor) -> None:
    receipt = apps.get_model("receipts", "Receipt")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.remove_index(receipt, INDEX)
        return
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX.name}")


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('receipts', '0017_hist_claim_duration_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='receipt',
            name='compacted_at',
            field=models.DateTimeField(blank=True, db_default=None, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(create, drop, atomic=False)],
            state_operations=[migrations.AddIndex(model_name='receipt', index=INDEX)],
        ),
    ]
