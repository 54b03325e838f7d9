# The outbox's operator actions were renamed to their verbs (docs/architecture.md, section 8);
# audit entries written before carry the old names. Nothing has been released, so rather than
# every reader of the audit log knowing both names, the stored entries take the new ones.

from django.db import migrations

RENAMED = {
    "outbox.retry_now": "outbox_message.send_now",
    "outbox.requeue_dead": "outbox_message.send_again",
    "outbox.release": "outbox_message.release",
}


def rename(apps, schema_editor) -> None:
    AuditEntry = apps.get_model("receipts", "AuditEntry")
    entries = AuditEntry.objects.using(schema_editor.connection.alias)
    for old, new in RENAMED.items():
        entries.filter(action=old).update(action=new)


class Migration(migrations.Migration):

    dependencies = [
        ('outbox', '0005_exact_text'),
        ('receipts', '0009_exact_text'),
    ]

    operations = [
        # Backwards nothing is renamed: the code before this migration read both names.
        migrations.RunPython(rename, migrations.RunPython.noop),
    ]
