from django.apps import AppConfig


class IdemdashConfig(AppConfig):
    name = "idemdash"
    verbose_name = "idemdash"
    default_auto_field = "django.db.models.BigAutoField"
