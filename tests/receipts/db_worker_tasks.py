"""A django.tasks task behind @receipts.once, for the db_worker proof in
tests/receipts/test_django_tasks.py: its effect is a line appended to a file, so the test
sees from outside how many times a worker ran its body. Django 6's django.tasks, or on
Django 5.2 the django-tasks backport, whose API is the same under another name."""

from __future__ import annotations

import os
import time

try:
    from django.tasks import TaskResultStatus, task
except ImportError:  # Django 5.2
    from django_tasks import TaskResultStatus, task

import receipts


@task
@receipts.once("email.send", key=lambda user_id, provider: f"welcome:{user_id}")
def send_welcome(user_id: int, provider: str) -> dict:
    downstream_key = receipts.current().downstream_key
    with open(provider, "a") as f:  # the provider: what it received, and the key it dedupes on
        f.write(f"{os.getpid()} {downstream_key}\n")
    time.sleep(0.5)  # holds the claim while the duplicates reach the other workers
    return {"sent": user_id, "downstream_key": downstream_key}
