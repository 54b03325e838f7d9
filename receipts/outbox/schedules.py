SCHEDULES = [
    {"name": "outbox.drain", "func": "receipts.outbox.tasks.drain", "schedule_type": "I", "minutes": 1},
]
