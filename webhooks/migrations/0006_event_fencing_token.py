from django.db import migrations, models


class Migration(migrations.Migration):
    """WebhookEvent.claim_token is named fencing_token, as on receipts and outbox messages
    (docs/architecture.md, section 8). The column keeps its name (db_column), so this
    changes Django's state only: sqlmigrate prints no SQL."""

    dependencies = [
        ('webhooks', '0005_webhook_attempt'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameField(model_name='webhookevent', old_name='claim_token', new_name='fencing_token'),
                migrations.AlterField(
                    model_name='webhookevent',
                    name='fencing_token',
                    field=models.UUIDField(blank=True, db_column='claim_token', help_text='Fences the worker holding the lease.', null=True),
                ),
            ],
        ),
    ]
