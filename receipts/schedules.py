SCHEDULES = [
    {"name": "receipts.purge", "func": "receipts.tasks.purge", "schedule_type": "H"},
    # Receipts past their operation's compact_after_seconds lose their bodies (receipts/compaction.py).
    {"name": "receipts.compact", "func": "receipts.tasks.compact", "schedule_type": "I", "minutes": 10},
    {"name": "receipts.rollup", "func": "receipts.tasks.roll_up", "schedule_type": "I", "minutes": 1},
    # A bulk run whose worker died (idemdash/core/bulk_runs.py:resume_stalled) goes on within a minute.
    {"name": "receipts.resume_bulk_runs", "func": "receipts.tasks.resume_bulk_runs", "schedule_type": "I", "minutes": 1},
]
