"""The admin of the demo's models: `make demo`'s staged outages, and the rows its webhook
handlers write."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from idemdash.core.columns import to_the_second
from idemdash.devtools import demo
from idemdash.devtools.models import DemoSwitch, Fulfilment, ShopifyOrder


@admin.register(DemoSwitch)
class DemoSwitchAdmin(admin.ModelAdmin):
    """`make demo`'s staged outages: "Fix" is the operator's bug fix (idemdash.devtools.demo)."""

    list_display = ("name", "failing", "description", "updated_at")
    readonly_fields = ("name", "failing", "description", "updated_at")
    actions = ["fix", "break_again"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # `manage.py demo_stage` makes them

    def _flip(self, request: HttpRequest, queryset: QuerySet, on: bool) -> None:
        actor = request.user.get_username()
        changed = [s.name for s in queryset if demo.set_failing(s, on, actor=actor, user=request.user)]
        state = "failing again" if on else "fixed: its handler succeeds now; reprocess its dead events"
        self.message_user(request, f"{', '.join(changed) or 'nothing'} {state}.")

    @admin.action(description="Fix: the handler succeeds from now on")
    def fix(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._flip(request, queryset, False)

    @admin.action(description="Break again: the handler fails")
    def break_again(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._flip(request, queryset, True)


@admin.register(Fulfilment)
class FulfilmentAdmin(admin.ModelAdmin):
    list_display = ["payment_id", "amount", "currency", "source_event", to_the_second("created_at", "created")]


@admin.register(ShopifyOrder)
class ShopifyOrderAdmin(admin.ModelAdmin):
    list_display = ["shop_domain", "order_id", "name", "total_price", "currency", to_the_second("created_at", "created")]
