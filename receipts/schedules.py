SCHEDULES = [
    {"name": "receipts.purge", "func": "receipts.tasks.purge", "schedule_type": "H"},
    {"name": "receipts.rollup", "func": "receipts.tasks.roll_up", "schedule_type": "I", "minutes": 1},
]
