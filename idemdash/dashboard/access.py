"""Who may see and who may act: two groups over two permissions.

`viewers` see every page; `operators` may also act (release, reprocess, send now, send again, singly or in bulk;
the permission's stored name still says "retry"). Superusers
pass every check. The groups are (re)created after every migrate, which also covers a test
database flushed between tests."""

from __future__ import annotations

from functools import wraps
from typing import Any, Callable
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django_htmx.http import HttpResponseClientRedirect
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType

VIEW = "idemdash_dashboard.view_dashboard"
OPERATE = "idemdash_dashboard.operate"

GROUPS = {
    "viewers": ["view_dashboard"],
    "operators": ["view_dashboard", "operate"],
}


def ensure_groups() -> None:
    from idemdash.dashboard.models import Dashboard

    content_type = ContentType.objects.get_for_model(Dashboard, for_concrete_model=False)
    perms = {}
    for codename, name in Dashboard._meta.permissions:
        perms[codename], _ = Permission.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
    for group_name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=group_name)
        group.permissions.add(*(perms[c] for c in codenames))


def _login_required(view: Callable[..., Any]) -> Callable[..., Any]:
    """login_required, except that an htmx request (a poll after the session expired) is
    told to load the login page as a whole page instead of swapping it into a fragment."""
    plain = login_required(view)

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if getattr(request, "htmx", False) and not request.user.is_authenticated:
            next_url = urlencode({"next": request.htmx.current_url_abs_path or "/"})
            return HttpResponseClientRedirect(f"{resolve_url(settings.LOGIN_URL)}?{next_url}")
        return plain(request, *args, **kwargs)

    return wrapper


def viewer_required(view: Callable[..., Any]) -> Callable[..., Any]:
    """Anonymous users go to the login page; logged-in users without the permission get 403."""
    return _login_required(permission_required(VIEW, raise_exception=True)(view))


def operator_required(view: Callable[..., Any]) -> Callable[..., Any]:
    return _login_required(permission_required(OPERATE, raise_exception=True)(view))
