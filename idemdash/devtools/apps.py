from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    name = "idemdash.devtools"
    label = "devtools"
    verbose_name = "Developer tools"
