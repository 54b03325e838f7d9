"""List columns, value displays and the read-only log admin shared by every app's admin (the
core, receipts, webhooks, the outbox, the dashboard): one look for times, long keys and JSON
across the admin."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import dateformat, timezone
from django.utils.html import format_html

from idemdash.core.masking import masked
from idemdash.core.reference_rows import referring
from idemdash_client.references import VALUE_MAX


# No style attributes here: the project's Content-Security-Policy refuses them
# (idemdash/settings.py). The admin's own stylesheet has `nowrap`, and gives `pre` a
# scrollbar for lines too long.


def pre(text: str) -> str:
    return format_html("<pre>{}</pre>", text)


def pretty_json(value: Any) -> str:
    """JSON as the admin shows it: secrets masked by kind (idemdash.core.masking)."""
    return pre(json.dumps(masked(value), indent=2, sort_keys=True, ensure_ascii=False))


# List columns that fit at 1440 px: times to the second with their zone on one line, and long
# keys cut to a fixed width on one line, whole in their title. Shared by every app's admin.


def to_the_second(field: str, description: str | None = None) -> Any:
    """A list column showing `field` as '2026-11-24 06:10:09 UTC', sortable by it."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def column(obj: Any) -> str | None:
        value = getattr(obj, field)
        if value is None:
            return None
        return format_html('<span class="nowrap">{}</span>',
                           dateformat.format(timezone.localtime(value), "Y-m-d H:i:s T"))

    return column


def clipped(field: str, description: str | None = None, width: int = 32) -> Any:
    """A list column showing `field` on one line, at most `width` characters, the whole
    value in its title (hover) and in the search."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def column(obj: Any) -> str:
        value = str(getattr(obj, field) or "")
        shown = value if len(value) <= width else value[: width - 1] + "…"
        return format_html('<span title="{}" class="nowrap">{}</span>', value, shown)

    return column


class _FilterSafeChangeList(ChangeList):
    def get_filters(self, request: Any) -> Any:
        try:
            return super().get_filters(request)
        except (ValueError, OverflowError) as exc:
            # Django's date_hierarchy lets these out for a year past 9998 or too large for
            # a C int (`?created_at__year=99999999999`): a 500. The admin's own answer to a
            # filter it cannot apply is the changelist again with `?e=1`.
            raise IncorrectLookupParameters(exc) from exc


class FilterSafe:
    """Mixed into every admin with a date_hierarchy: any filter input is a page, never a 500."""

    def get_changelist(self, request: Any, **kwargs: Any) -> type[ChangeList]:
        return _FilterSafeChangeList


class ReadOnlyAdmin(FilterSafe, admin.ModelAdmin):
    """A log's admin: rows are read, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    """Rows of a log on their object's admin page (its attempts, deliveries, references):
    `fields` shown read-only, never added or deleted there. Each sets `model` and `fields`."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return list(self.fields or ())

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReferenceInline(ReadOnlyInline):
    """An object's references on its admin page (each app's admin sets `model`)."""

    fields = ["kind", "value", "created_at"]
    ordering = ["created_at", "pk"]


class SearchesReferences:
    """Mixed into an object's admin: its search also finds the objects with a reference whose
    value is exactly the search term (a charge id, an order number), an index lookup."""

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)  # type: ignore[misc]
        term = search_term.strip()
        if term and len(term) <= VALUE_MAX:
            found = found | referring(queryset, term)
        return found, may_have_duplicates
