from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "What `make demo` does before it starts the processes: migrate, collectstatic, "
        "install_schedules, ensure_admin, and demo_stage (the staged outages and the demo's "
        "alert rule). One command, so that Django starts once, not five times."
    )

    def handle(self, *args, **options) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        call_command("install_schedules", stdout=self.stdout)
        call_command("ensure_admin", stdout=self.stdout)
        call_command("demo_stage", stdout=self.stdout)
