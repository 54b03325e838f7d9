import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """The demo's tables, moved here from the webhooks app (webhooks 0008) and the dashboard
    (idemdash 0006), which drop theirs."""

    initial = True

    dependencies = [
        ('webhooks', '0008_demo_models_move_to_devtools'),
    ]

    operations = [
        migrations.CreateModel(
            name='DemoSwitch',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=64, unique=True)),
                ('failing', models.BooleanField(default=True, help_text='On: the demo handler fails. Off: it succeeds.')),
                ('description', models.CharField(blank=True, max_length=255)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name': 'demo switch',
                'verbose_name_plural': 'demo switches',
                'ordering': ['name'],
            },
        ),
        migrations.CreateModel(
            name='Fulfilment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('payment_id', models.CharField(max_length=255, unique=True)),
                ('amount', models.BigIntegerField(blank=True, null=True)),
                ('currency', models.CharField(blank=True, max_length=8)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('source_event', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to='webhooks.webhookevent')),
            ],
        ),
        migrations.CreateModel(
            name='ShopifyOrder',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('shop_domain', models.CharField(max_length=255)),
                ('order_id', models.CharField(max_length=64)),
                ('name', models.CharField(blank=True, max_length=64)),
                ('total_price', models.CharField(blank=True, max_length=32)),
                ('currency', models.CharField(blank=True, max_length=8)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('source_event', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to='webhooks.webhookevent')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('shop_domain', 'order_id'), name='shopify_order_once')],
            },
        ),
    ]
