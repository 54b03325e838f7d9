# Claim durations (Attempt.claim_ms) and their hourly histogram (receipts.rollup.CLAIMS).
# Adding a nullable column without a default is instant on PostgreSQL and MySQL/MariaDB.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('receipts', '0015_refs_references'),
    ]

    operations = [
        migrations.CreateModel(
            name='ClaimDurationHourly',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hour', models.DateTimeField(help_text='Start of the hour (UTC).')),
                ('count', models.PositiveIntegerField()),
                ('bucket', models.SmallIntegerField()),
                ('sum_ms', models.FloatField(default=0)),
            ],
            options={
                'verbose_name': 'claim durations per hour',
                'verbose_name_plural': 'claim durations per hour',
            },
        ),
        migrations.AddField(
            model_name='attempt',
            name='claim_ms',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name='claimdurationhourly',
            constraint=models.UniqueConstraint(fields=('hour', 'bucket'), name='claim_duration_hourly_uniq'),
        ),
    ]
