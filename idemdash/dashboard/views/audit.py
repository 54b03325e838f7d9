"""The audit log: every operator action, filtered, newest first, a page of 50 at a time; a
bulk run is one entry, its items' entries grouped under it (`?run=`). Under htmx only the
table, which the page refreshes with the same filters while it shows the newest entries."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from idemdash.dashboard.access import viewer_required
from idemdash.dashboard import queries
from idemdash.dashboard.forms import AuditFilter
from idemdash.dashboard.templatetags.idemdash_tags import AUDIT_VERBS, audit_verb
from idemdash.dashboard.views.pages import describe_filter, partial_or_page
from idemdash.core.audit import AuditEntry

@require_GET
@viewer_required
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilter(request.GET)
    if not form.is_valid():
        return partial_or_page(request, "dashboard/audit.html", "dashboard/partials/audit_table.html",
                               {"form": form, "entries": []}, status=400)
    entries = form.entries(AuditEntry.objects.select_related("user").order_by("-id"))
    before = request.GET.get("before", "")
    if before.isdigit():
        entries = entries.filter(id__lt=int(before))
    rows = list(entries[:51])
    more = len(rows) > 50
    rows = rows[:50]
    queries.name_audit_subjects(rows)
    query = request.GET.copy()
    query.pop("before", None)
    return partial_or_page(request, "dashboard/audit.html", "dashboard/partials/audit_table.html", {
        "form": form, "entries": rows, "next_before": rows[-1].pk if more else None, "paged": bool(before),
        # The action by its verb, as the rows name it.
        "filters": [(label, audit_verb(value) if label == form.fields["action"].label else value)
                    for label, value in describe_filter(form)],
        "query": query.urlencode(),
        "actions": sorted(AUDIT_VERBS),
    })
