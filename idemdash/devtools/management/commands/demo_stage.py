from django.core.management.base import BaseCommand

from idemdash.devtools import demo


class Command(BaseCommand):
    help = (
        "For `make demo` (demo_setup runs it): arm the demo's staged outages (the Shopify "
        "refunds/create handler fails until its switch is turned off) and install the alert "
        "rule on dead webhook events once. Safe to run again."
    )

    def handle(self, *args, **options) -> None:
        armed, created = demo.setup()
        if armed:
            self.stdout.write(f"demo outages on: {', '.join(armed)} (fix them at /admin/devtools/demoswitch/)")
        rule = demo.DEMO_RULE["name"]
        self.stdout.write(f"alert rule {rule!r} " + ("installed" if created else "already there; left as it is"))
        staged = demo.stage_sent_refund()
        if staged is None:
            self.stdout.write("no Shopify endpoint (SHOPIFY_WEBHOOK_SECRET unset): no refund staged for the preflight")
        else:
            self.stdout.write(
                f"refund already handled, confirmation sent: /events/{staged.event_id}/ "
                + ("staged" if staged.created else "already there")
            )
