import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")
# Every setting named CELERY_* in Django's settings configures Celery.
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
