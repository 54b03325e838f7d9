from django.db import migrations


class Migration(migrations.Migration):
    """`DemoSwitch` is the devtools app's now (idemdash/devtools/models.py): the dashboard
    keeps no table of the demo's. `manage.py demo_setup` makes the switches again."""

    dependencies = [
        ('idemdash', '0005_operate_permission_named_by_its_verbs'),
    ]

    operations = [
        migrations.DeleteModel(name='DemoSwitch'),
    ]
