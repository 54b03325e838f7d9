"""A django.tasks task behind @receipts.once, for the db_worker proof in
tests/receipts/test_django_tasks.py (Django 6 only: django.tasks is imported here): its
effect is a line appended to a file, so the test sees from outside how many times a worker
ran its body."""

from __future__ import annotations

import os
import time

from django.tasks import task

import receipts


@task
@receipts.once("email.send", key=lambda user_id, provider: f"welcome:{user_id}")
def send_welcome(user_id: int, provider: str) -> dict:
    downstream_key = receipts.current().downstream_key
    with open(provider, "a") as f:  # the provider: what it received, and the key it dedupes on
        f.write(f"{os.getpid()} {downstream_key}\n")
    time.sleep(0.5)  # holds the claim while the duplicates reach the other workers
    return {"sent": user_id, "downstream_key": downstream_key}
