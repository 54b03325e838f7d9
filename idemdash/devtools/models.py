"""What only `make demo` needs in the database: the side effects of the demo's webhook
handlers (idemdash.devtools.webhook_handlers) and the switches of its staged outages
(idemdash.devtools.demo). They live here, not in the product's apps, so that a host that
installs `webhooks` or the dashboard gets none of their tables and none of their rows."""

from __future__ import annotations

from django.db import models

from webhooks.models import WebhookEvent


class Fulfilment(models.Model):
    """Demo side effect: one per Stripe payment, however many events announce it."""

    payment_id = models.CharField(max_length=255, unique=True)
    amount = models.BigIntegerField(null=True, blank=True)
    currency = models.CharField(max_length=8, blank=True)
    source_event = models.ForeignKey(WebhookEvent, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"fulfilment of {self.payment_id}"


class ShopifyOrder(models.Model):
    """Demo side effect: one per Shopify order, however many times orders/create arrives."""

    shop_domain = models.CharField(max_length=255)
    order_id = models.CharField(max_length=64)
    name = models.CharField(max_length=64, blank=True)
    total_price = models.CharField(max_length=32, blank=True)
    currency = models.CharField(max_length=8, blank=True)
    source_event = models.ForeignKey(WebhookEvent, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["shop_domain", "order_id"], name="shopify_order_once"),
        ]

    def __str__(self) -> str:
        return f"{self.shop_domain} order {self.order_id}"


class DemoSwitch(models.Model):
    """A switch of `make demo`'s staged outages (idemdash.devtools.demo): while `failing` is on, the
    demo's handler of that name fails. Only `manage.py demo_setup` creates rows, so a
    database where the demo was never set up has none and nothing fails."""

    name = models.CharField(max_length=64, unique=True)
    failing = models.BooleanField(default=True, help_text="On: the demo handler fails. Off: it succeeds.")
    description = models.CharField(max_length=255, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "demo switch"
        verbose_name_plural = "demo switches"

    def __str__(self) -> str:
        return f"{self.name} ({'failing' if self.failing else 'fixed'})"
