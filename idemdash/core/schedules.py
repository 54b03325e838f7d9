"""Install the periodic work that every app declares, idempotently.

Each installed app may declare its periodic work in `<app>/schedules.py`:

    SCHEDULES = [{"name": "<app label>.<what>", "func": "dotted.path", "schedule_type": "I", "minutes": 1}]

using django-q2 Schedule field names. Every `migrate` runs `install_schedules()` (a
post_migrate handler in receipts/apps.py), as does `manage.py install_schedules`. Running it
twice changes nothing the second time."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Q
from django.utils.module_loading import import_string, module_has_submodule
from django_q.conf import Conf
from django_q.models import Schedule


@dataclass
class Declared:
    prefixes: list[str] = field(default_factory=list)
    schedules: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class InstallResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def this_cluster() -> str | None:
    """The `cluster` this process's schedules name: none when its cluster runs the schedules
    that name none (its cluster_name is its name), else its cluster_name.

    django-q2 runs a schedule that names no `cluster` in every cluster whose `cluster_name`
    is its `name` (the usual case). A cluster that must not run another's on a shared
    database (idemdash's server beside a host project's own django-q2 worker:
    idemdash/settings.py gives it a `cluster_name` of its own) has schedules naming it, so
    each cluster runs its own copy of what its apps declare (both drain their own outbox,
    say) and never the other's (the host's nightly job, or idemdash's alerts in a host that
    lacks the dashboard)."""
    return None if Conf.CLUSTER_NAME == Conf.PREFIX else Conf.CLUSTER_NAME


def declared_schedules() -> Declared:
    declared = Declared()
    names: set[str] = set()
    for config in apps.get_app_configs():
        if not module_has_submodule(config.module, "schedules"):
            continue
        module = import_module(f"{config.name}.schedules")
        schedules = getattr(module, "SCHEDULES", None)
        if schedules is None:
            continue
        prefix = f"{config.label}."
        declared.prefixes.append(prefix)
        for entry in schedules:
            name = entry.get("name", "")
            if not name.startswith(prefix):
                raise ImproperlyConfigured(f"{module.__name__}: schedule names must start with {prefix!r}, got {name!r}")
            if name in names:
                raise ImproperlyConfigured(f"{module.__name__}: schedule {name!r} is declared twice")
            try:
                import_string(entry["func"])
            except (ImportError, KeyError) as exc:
                raise ImproperlyConfigured(f"{module.__name__}: schedule {name!r} has no importable func: {exc}") from None
            names.add(name)
            declared.schedules.append(dict(entry))
    return declared


def install_schedules(declared: Declared | None = None) -> InstallResult:
    """Create or update each declared schedule by name, and delete those an app no longer
    declares. A schedule is identified by its name and its cluster (`this_cluster`): an
    install creates, updates and removes only this process's cluster's. An app owns the
    names that start with its label and a dot, and only those are ever deleted, so schedules
    that an operator adds in the admin under other names are left alone."""
    declared = declared_schedules() if declared is None else declared
    result = InstallResult()
    cluster = this_cluster()
    ours = Schedule.objects.filter(Q(cluster=cluster) if cluster else Q(cluster__isnull=True) | Q(cluster=""))
    with transaction.atomic():
        for entry in declared.schedules:
            fields = {**{k: v for k, v in entry.items() if k != "name"}, "cluster": cluster}
            existing = list(ours.filter(name=entry["name"]).order_by("pk"))
            # Duplicates (made by hand in the admin) would make update_or_create fail.
            for extra in existing[1:]:
                extra.delete()
                result.removed.append(extra.name)
            if existing and all(getattr(existing[0], k) == v for k, v in fields.items()):
                result.unchanged.append(entry["name"])
                continue
            _, created = ours.update_or_create(name=entry["name"], defaults=fields)
            (result.created if created else result.updated).append(entry["name"])
        keep = {entry["name"] for entry in declared.schedules}
        for prefix in declared.prefixes:
            for schedule in ours.filter(name__startswith=prefix).exclude(name__in=keep):
                schedule.delete()
                result.removed.append(schedule.name)
    return result
