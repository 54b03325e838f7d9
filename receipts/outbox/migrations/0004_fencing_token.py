from django.db import migrations, models


class Migration(migrations.Migration):
    """OutboxMessage.claim_token and OutboxAttempt.claim_token are named fencing_token, as on
    receipts and webhook events (docs/architecture.md, section 8). The columns keep their
    name (db_column), so this changes Django's state only: sqlmigrate prints no SQL."""

    dependencies = [
        ('outbox', '0003_hourly_rollups'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameField(model_name='outboxmessage', old_name='claim_token', new_name='fencing_token'),
                migrations.AlterField(
                    model_name='outboxmessage',
                    name='fencing_token',
                    field=models.PositiveBigIntegerField(db_column='claim_token', default=0),
                ),
                migrations.RenameField(model_name='outboxattempt', old_name='claim_token', new_name='fencing_token'),
                migrations.AlterField(
                    model_name='outboxattempt',
                    name='fencing_token',
                    field=models.PositiveBigIntegerField(db_column='claim_token'),
                ),
            ],
        ),
    ]
