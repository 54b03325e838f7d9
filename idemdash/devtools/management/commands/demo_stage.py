from django.core.management.base import BaseCommand

from idemdash.dashboard.models import AlertRule
from idemdash.devtools import demo


class Command(BaseCommand):
    help = (
        "For `make demo` (demo_setup runs it): arm the demo's staged outages (the Shopify "
        "refunds/create handler fails until its switch is turned off) and say which alert rules "
        "page for them. Safe to run again."
    )

    def handle(self, *args, **options) -> None:
        armed = demo.setup()
        if armed:
            self.stdout.write(f"demo outages on: {', '.join(armed)} (fix them at /admin/devtools/demoswitch/)")
        rules = AlertRule.objects.filter(enabled=True).order_by("name").values_list("name", flat=True)
        self.stdout.write(f"alert rules that page: {', '.join(rules) or 'none'} (/alerts/rules/)")
        staged = demo.stage_sent_refund()
        if staged is None:
            self.stdout.write("no Shopify endpoint (SHOPIFY_WEBHOOK_SECRET unset): no refund staged for the preflight")
        else:
            self.stdout.write(
                f"refund already handled, confirmation sent: /events/{staged.event_id}/ "
                + ("staged" if staged.created else "already there")
            )
