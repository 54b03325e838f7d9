from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from idemdash.simulator import write_demo_env


class Command(BaseCommand):
    help = (
        "Write var/demo.env (demo webhook secrets, made once) if it is missing and print its path, "
        "for `make demo` to source. Secrets already set in the environment win."
    )

    def handle(self, *args, **options) -> None:
        self.stdout.write(str(write_demo_env(Path(settings.VAR_DIR) / "demo.env")))
