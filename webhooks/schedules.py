"""django-q2 schedules of this app, installed by the project's schedule installer
(with update_or_create on the name). Field names are django_q.models.Schedule's."""

SCHEDULES = [
    {
        "name": "webhooks.sweep",
        "func": "webhooks.tasks.sweep",
        "schedule_type": "I",
        "minutes": 1,
        "repeats": -1,
    },
]
