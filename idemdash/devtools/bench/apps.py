from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "idemdash.devtools.bench"
    label = "bench"
    verbose_name = "Benchmarks"
    default_auto_field = "django.db.models.BigAutoField"
