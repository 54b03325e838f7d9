from django.db import migrations


class Migration(migrations.Migration):
    """The demo's side-effect tables leave the product: `Fulfilment` and `ShopifyOrder` are
    the devtools app's now (idemdash/devtools/models.py, its own tables), so a host that
    installs `webhooks` gets neither. Their rows were the demo's only; nothing is released,
    so they are dropped, not copied."""

    dependencies = [
        ('webhooks', '0007_exact_text'),
    ]

    operations = [
        migrations.DeleteModel(name='Fulfilment'),
        migrations.DeleteModel(name='ShopifyOrder'),
    ]
