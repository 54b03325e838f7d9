"""What every app of ours says alike in its AppConfig."""

from __future__ import annotations


class BigIntegerIds:
    """Mixed into each of our apps' AppConfig: their models' implicit primary keys are bigints,
    as their migrations were written with, whatever the host's DEFAULT_AUTO_FIELD says.

    A mixin, not an AppConfig subclass: Django takes the one AppConfig subclass an app's
    `apps.py` holds as that app's config, and an AppConfig base imported there would be a
    second one."""

    default_auto_field = "django.db.models.BigAutoField"
