# Text compared byte for byte on MySQL/MariaDB, whose default collations ignore case and
# trailing spaces (idemdash/core/mysql.py); nothing on any other database.

from django.db import migrations

from idemdash.core.mysql import exact_text


class Migration(migrations.Migration):

    dependencies = [
        ('outbox', '0004_fencing_token'),
    ]

    operations = [
        exact_text('outbox'),
    ]
