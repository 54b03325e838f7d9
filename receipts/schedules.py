SCHEDULES = [
    {"name": "receipts.purge", "func": "receipts.tasks.purge", "schedule_type": "H"},
]
