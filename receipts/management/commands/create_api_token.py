from django.core.management.base import BaseCommand, CommandError

from idemdash.core.clients import ApiClient, create_token


class Command(BaseCommand):
    help = "Create an API client and print its bearer token (shown this once; stored hashed)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="The client's name; its receipts are scoped to it.")

    def handle(self, *args, name: str, **options) -> None:
        if ApiClient.objects.filter(name=name).exists():
            raise CommandError(f"An API client named {name!r} exists already.")
        client, token = create_token(name)
        self.stdout.write(token)
        self.stderr.write(f"Created API client {client.name!r}. Store the token now: it is not shown again.")
