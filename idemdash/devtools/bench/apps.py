from django.apps import AppConfig

from idemdash.core.appconfig import BigIntegerIds


class BenchConfig(BigIntegerIds, AppConfig):
    name = "idemdash.devtools.bench"
    label = "bench"
    verbose_name = "Benchmarks"
