# Every rejected delivery ever, per cause (webhooks.RejectionCount), with a row for each cause
# from the start: a rejection then only adds to its row (one UPDATE), and concurrent first
# rejections of a cause never race to insert it (on MariaDB that race deadlocks).

from django.db import migrations, models


def seed(apps, schema_editor) -> None:
    counts = apps.get_model("webhooks", "RejectionCount")
    causes = counts._meta.get_field("cause").choices
    counts.objects.bulk_create([counts(cause=cause, count=0) for cause, _ in causes], ignore_conflicts=True)


class Migration(migrations.Migration):

    dependencies = [
        ('webhooks', '0010_refs_references'),
    ]

    operations = [
        migrations.CreateModel(
            name='RejectionCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('cause', models.CharField(choices=[('missing_header', 'Missing Header'), ('malformed_header', 'Malformed Header'), ('stale_timestamp', 'Stale Timestamp'), ('future_timestamp', 'Future Timestamp'), ('no_matching_signature', 'No Matching Signature'), ('no_active_secret', 'No Active Secret'), ('invalid_json', 'Invalid Json'), ('missing_id', 'Missing Id'), ('invalid_id', 'Invalid Id'), ('unstorable_payload', 'Unstorable Payload'), ('body_too_large', 'Body Too Large')], max_length=32, unique=True)),
                ('count', models.PositiveBigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(seed, migrations.RunPython.noop),
        migrations.AddField(
            model_name='processingdurationhourly',
            name='sum_ms',
            field=models.FloatField(default=0),
        ),
    ]
