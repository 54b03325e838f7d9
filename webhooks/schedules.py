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

# Run by every worker cluster every few seconds (idemdash/worker/liveness.py:tick), finer than
# a schedule: a stuck event is taken over, and an event whose enqueue failed is enqueued
# again, within seconds.
TICKS = ["webhooks.tasks.sweep"]
