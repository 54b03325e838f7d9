import os
import time
from pathlib import Path

from celery import shared_task

import receipts


# acks_late: the message is acknowledged when the task settles, not when it starts, so a
# worker killed mid-task leaves it to be delivered again; reject_on_worker_lost: the same
# when only the pool process running it dies. Either way the body may start twice for one
# message, and more than once when the message itself was sent twice: @receipts.once makes
# it one effect per key, and the task returns that one result every time.
@shared_task(acks_late=True, reject_on_worker_lost=True)
@receipts.once("email.send", key=lambda user_id, provider: f"welcome:{user_id}", lease_seconds=2)
def send_welcome(user_id: int, provider: str) -> dict:
    return _send(user_id, provider)


# The same task for an effect that must not be repeated blindly: its operation holds a key
# whose attempt died unsettled (settings.py: after_crash "hold"), so the message delivered
# again after its worker was killed raises receipts.OutcomeUnknown instead of sending twice,
# until an operator (or a reconcile function) says what happened.
@shared_task(acks_late=True, reject_on_worker_lost=True)
@receipts.once("invoice.send", key=lambda user_id, provider: f"invoice:{user_id}")
def send_invoice(user_id: int, provider: str) -> dict:
    return _send(user_id, provider)


def _send(user_id: int, provider: str) -> dict:
    downstream_key = receipts.current().downstream_key
    # The provider: what it received, the key it deduplicates on. A real one would be
    # e.g. EmailMessage(..., headers={"Idempotency-Key": downstream_key}).send().
    with open(provider, "a") as f:
        f.write(f"{os.getpid()} {downstream_key}\n")
    stall = Path(provider + ".stall")
    if stall.exists():  # the test's switch: hang after the effect until killed
        stall.unlink()
        Path(provider + ".sent").touch()
        time.sleep(120)
    time.sleep(0.5)  # holds the claim while the duplicates reach the other worker processes
    return {"sent": user_id, "downstream_key": downstream_key}
