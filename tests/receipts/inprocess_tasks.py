"""A django-q2 task behind @receipts.once, for the qcluster proof in
tests/receipts/test_inprocess.py: its effect is a line appended to a file, so the test sees
from outside how many times a worker of the cluster ran its body."""

from __future__ import annotations

import os
import time

import receipts


@receipts.once("email.send", key=lambda user_id, effects: f"welcome:{user_id}")
def send_welcome(user_id: int, effects: str) -> str:
    with open(effects, "a") as f:
        f.write(f"{os.getpid()} {receipts.current().downstream_key}\n")
    time.sleep(0.5)  # holds the claim while the duplicates reach the other workers
    return f"welcome sent to {user_id}"
