"""The dashboard's settings, flat `IDEMDASH_*` names, each optional (the convention of every
app's conf module), so that a host project mounting the dashboard needs none of them."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Where operators open the dashboard, for the links in alert notifications; empty: the
    # links are paths only (a host project sets its own address).
    "IDEMDASH_BASE_URL": "",
}


def setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS[name])
