from django.apps import AppConfig


class WorkerConfig(AppConfig):
    # Listed before django_q in INSTALLED_APPS, so that its `qcluster` command is the one
    # `manage.py qcluster` runs (the first app to define a command wins).
    name = "idemdash.worker"
    label = "idemdash_worker"
    verbose_name = "Background worker"

    def ready(self) -> None:
        from django_q.signals import pre_execute

        from idemdash.worker import liveness

        pre_execute.connect(liveness._took_work, dispatch_uid="idemdash.worker.took_work")
