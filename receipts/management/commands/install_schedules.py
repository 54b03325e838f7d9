from django.core.management.base import BaseCommand

from idemdash.core.schedules import install_schedules


class Command(BaseCommand):
    help = "Create or update every app's declared periodic work (django-q2 schedules). Safe to repeat."

    def handle(self, *args, **options) -> None:
        result = install_schedules()
        for label in ("created", "updated", "removed", "unchanged"):
            names = getattr(result, label)
            if names:
                self.stdout.write(f"{label}: {', '.join(names)}")
