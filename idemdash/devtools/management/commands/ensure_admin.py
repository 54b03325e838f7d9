import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Create the `admin` superuser if it does not exist. The password comes from "
        "IDEMDASH_ADMIN_PASSWORD, or is generated and printed this once."
    )

    def handle(self, *args, **options) -> None:
        User = get_user_model()
        if User.objects.filter(username="admin").exists():
            self.stdout.write("admin user exists; password unchanged")
            return
        password = os.environ.get("IDEMDASH_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "admin@localhost", password)
        if os.environ.get("IDEMDASH_ADMIN_PASSWORD"):
            self.stdout.write(self.style.SUCCESS("created admin (password from IDEMDASH_ADMIN_PASSWORD)"))
        else:
            self.stdout.write(self.style.SUCCESS(f"created admin with password: {password}"))
            self.stdout.write("It is shown only now; set IDEMDASH_ADMIN_PASSWORD to choose it.")
