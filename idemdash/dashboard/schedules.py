"""django-q2 schedules of this app, installed by `migrate` (and `manage.py install_schedules`)."""

SCHEDULES = [
    {"name": "idemdash_dashboard.alerts", "func": "idemdash.dashboard.tasks.evaluate_alerts", "schedule_type": "I", "minutes": 1},
]
