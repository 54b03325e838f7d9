SCHEDULES = [
    {"name": "outbox.drain", "func": "receipts.outbox.tasks.drain", "schedule_type": "I", "minutes": 1},
]

# Run by every worker cluster every few seconds (idemdash/worker/liveness.py:tick): a short
# drain, so that a message whose drainer died is sent again soon after its lease runs out.
TICKS = ["receipts.outbox.tasks.drain_due"]
