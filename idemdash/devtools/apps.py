from django.apps import AppConfig

from idemdash.core.appconfig import BigIntegerIds


class DevtoolsConfig(BigIntegerIds, AppConfig):
    name = "idemdash.devtools"
    label = "devtools"
    verbose_name = "Developer tools"
