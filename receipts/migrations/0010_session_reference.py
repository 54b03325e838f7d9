# A receipt recorded the caller's session key, shown on the receipt page and in the admin:
# whoever read it could act as that session. It now records a keyed reference
# (receipts/decorators.py:session_reference); receipts written before take theirs here.

from django.db import migrations

from receipts.decorators import session_reference


def replace_session_keys(apps, schema_editor) -> None:
    for name in ("Receipt", "ArchivedReceipt"):
        rows = apps.get_model("receipts", name).objects.using(schema_editor.connection.alias)
        for pk, session_key in rows.exclude(session_id="").exclude(session_id__startswith="session:").values_list(
            "pk", "session_id"
        ).iterator():
            rows.filter(pk=pk).update(session_id=session_reference(session_key))


class Migration(migrations.Migration):

    dependencies = [
        ('receipts', '0009_exact_text'),
    ]

    operations = [
        # Backwards there is nothing to restore: the keys are gone, as they should be.
        migrations.RunPython(replace_session_keys, migrations.RunPython.noop),
    ]
