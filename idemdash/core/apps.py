from django.apps import AppConfig

from idemdash.core.appconfig import BigIntegerIds


class CoreConfig(BigIntegerIds, AppConfig):
    # The models every app shares (models.py). The label is the package's path, as the
    # worker's and the dashboard's are, so that a host's own `core` app cannot clash with it.
    name = "idemdash.core"
    label = "idemdash_core"
    verbose_name = "Audit log and API clients"
