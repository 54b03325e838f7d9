"""The audit log: every operator action, filtered, newest first, a page of 50 at a time; a
bulk run is one entry, its items' entries grouped under it (`?run=`). Under htmx only the
table, which the page refreshes with the same filters while it shows the newest entries."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from idemdash.dashboard.access import viewer_required
from idemdash.dashboard import queries
from idemdash.dashboard.forms import AuditFilter
from idemdash.dashboard.templatetags.idemdash_tags import audit_verb
from idemdash.dashboard.views.pages import describe_filter, newest_first_page, partial_or_page
from idemdash.core.audit import AuditEntry

@require_GET
@viewer_required
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilter(request.GET)
    if not form.is_valid():
        return partial_or_page(request, "dashboard/audit.html", "dashboard/partials/audit_table.html",
                               {"form": form, "rows": []}, status=400)
    context = {
        "form": form,
        # The action by its verb, as the rows name it.
        "filters": [(label, audit_verb(value) if label == form.fields["action"].label else value)
                    for label, value in describe_filter(form)],
        "actions": sorted(set(queries.AUDIT_VERBS.values())),  # what the filter suggests: the verbs shown
    }
    newest_first_page(request, form.entries(AuditEntry.objects.select_related("user")), context)
    queries.name_audit_subjects(context["rows"])
    return partial_or_page(request, "dashboard/audit.html", "dashboard/partials/audit_table.html", context)
