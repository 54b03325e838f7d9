# Text compared byte for byte on MySQL/MariaDB, whose default collations ignore case and
# trailing spaces (idemdash/core/mysql.py); nothing on any other database.

from django.db import migrations

from idemdash.core.mysql import exact_text


class Migration(migrations.Migration):

    dependencies = [
        ('webhooks', '0006_event_fencing_token'),
    ]

    operations = [
        exact_text('webhooks'),
    ]
