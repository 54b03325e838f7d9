# The attempt log's (created_at, outcome) index becomes (created_at, outcome, claim_ms), so
# the claim-duration roll-up reads it index-only, as the outcome roll-up does, without a
# second index for every logged attempt to write.
#
# On PostgreSQL the new index is built CONCURRENTLY before the old one is dropped, so a
# host upgrading with millions of attempts keeps taking claims meanwhile (a plain CREATE
# INDEX blocks every write to the table for the whole build); an INVALID index left by a
# failed build is dropped and built again. Elsewhere Django's own operations run.

from django.db import migrations, models

from idemdash.core.pg import build_index_concurrently

OLD = models.Index(fields=["created_at", "outcome"], name="attempt_age_outcome")
NEW = models.Index(fields=["created_at", "outcome", "claim_ms"], name="attempt_age_outcome_claim")


def _swap(schema_editor, model, add: models.Index, drop: models.Index) -> None:
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.add_index(model, add)
        schema_editor.remove_index(model, drop)
        return
    columns = ", ".join(schema_editor.quote_name(model._meta.get_field(f).column) for f in add.fields)
    table = schema_editor.quote_name(model._meta.db_table)
    build_index_concurrently(schema_editor, add.name, f"CREATE INDEX {add.name} ON {table} ({columns})")
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {drop.name}")


def forwards(apps, schema_editor) -> None:
    _swap(schema_editor, apps.get_model("receipts", "Attempt"), NEW, OLD)


def backwards(apps, schema_editor) -> None:
    _swap(schema_editor, apps.get_model("receipts", "Attempt"), OLD, NEW)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('receipts', '0016_hist_claim_durations'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="attempt", name=OLD.name),
                migrations.AddIndex(model_name="attempt", index=NEW),
            ],
            database_operations=[migrations.RunPython(forwards, backwards, atomic=False)],
        ),
    ]
