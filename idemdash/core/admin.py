"""Admin for the core's shared models: the operator audit log, read-only, and the API clients,
whose token is created and shown once on adding one."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from idemdash.core import audit
from idemdash.core.audit import AuditEntry
from idemdash.core.clients import ApiClient, create_token
from idemdash.core.columns import ReadOnlyAdmin, clipped, to_the_second


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = (to_the_second("created_at", "at"), "actor", "action", "object_type", clipped("object_name", "object"),
                    clipped("object_id", "object id"), "status_before", "status_after", "run_id")
    list_filter = ("action", "object_type")
    search_fields = ("actor", "object_name", "object_id", "detail")
    date_hierarchy = "created_at"


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    """Adding a client creates its token and shows it once; the hash is never a form field."""

    list_display = ("name", "token_prefix", to_the_second("created_at", "created"), to_the_second("last_used_at", "last used"),
                    to_the_second("revoked_at", "revoked"))
    search_fields = ("name", "token_prefix")
    actions = ["revoke_selected"]

    def get_fields(self, request: HttpRequest, obj: ApiClient | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("name",)
        return ("name", "token_prefix", "created_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request: HttpRequest, obj: ApiClient | None = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        # The name is the receipts' scope: renaming would orphan them.
        return ("name", "token_prefix", "created_at", "last_used_at", "revoked_at")

    def save_model(self, request: HttpRequest, obj: ApiClient, form: Any, change: bool) -> None:
        if change:
            return
        client, token = create_token(obj.name)
        obj.pk = client.pk
        obj.token_prefix = client.token_prefix
        obj.token_hash = client.token_hash
        obj.created_at = client.created_at
        obj._state.adding = False
        obj._new_token = token  # type: ignore[attr-defined]  # shown by response_add, never stored
        audit.record(request.user.username, "apiclient.create", client, user=request.user)

    def response_add(self, request: HttpRequest, obj: ApiClient, post_url_continue: str | None = None) -> HttpResponse:
        # Rendered directly, not put in a message: messages may travel in a cookie.
        return TemplateResponse(
            request,
            "admin/idemdash_core/apiclient/token_created.html",
            {**self.admin_site.each_context(request), "client": obj, "token": obj._new_token},  # type: ignore[attr-defined]
        )

    @admin.action(description="Revoke selected API clients", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        revoked = 0
        for client in queryset.filter(revoked_at=None):
            if ApiClient.objects.filter(pk=client.pk, revoked_at=None).update(revoked_at=timezone.now()) == 1:
                audit.record(request.user.username, "apiclient.revoke", client, "active", "revoked", user=request.user)
                revoked += 1
        self.message_user(request, f"Revoked {revoked} API client(s).", messages.SUCCESS)
