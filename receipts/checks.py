"""System checks: what would otherwise fail only at a request (a decorated dispatch, an
operation policy), an outbox used without its app, and databases set up against a claim."""

from __future__ import annotations

import sys
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import Error, Tags, register
from django.db import DatabaseError, connections
from django.db.migrations.loader import MigrationLoader
from django.utils.module_loading import module_has_submodule

from receipts import coverage, placement
from receipts.conf import PolicyRefused, policy_for, reconciler, setting

# Named by string: receipts never imports the outbox (docs/architecture.md, section 9).
OUTBOX_APP = "receipts.outbox"


@register(Tags.urls)
def idempotent_on_dispatch(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """`method_decorator(idempotent(...), name="dispatch")` on a routed DRF APIView (E001) or async View (E005)."""
    if not getattr(settings, "ROOT_URLCONF", None):
        return []
    errors = []
    classes = (getattr(c, "cls", None) or getattr(c, "view_class", None) for c in coverage.callbacks())
    for view_class in dict.fromkeys(c for c in classes if c is not None):
        operation = getattr(view_class.dispatch, "idempotent_operation", None)
        refusal = None if operation is None else placement.dispatch_refusal(view_class, operation)
        if refusal is not None:
            errors.append(Error(refusal.message, hint=refusal.hint, obj=view_class, id=refusal.id))
    return errors


def _outbox_in_use() -> list[str]:
    """What shows the outbox in use: a module of it imported, `outbox_actions`, `OUTBOX_*` settings."""
    signs = sorted({name for name in sys.modules if name == OUTBOX_APP or name.startswith(OUTBOX_APP + ".")})
    signs += [f"{config.name}.outbox_actions" for config in apps.get_app_configs()
              if module_has_submodule(config.module, "outbox_actions")]
    signs += sorted(name for name in dir(settings) if name.startswith("OUTBOX_"))
    return signs


@register()
def outbox_installed(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The outbox used without its app installed: said at start-up, with the fix."""
    if apps.is_installed(OUTBOX_APP):
        return []
    signs = _outbox_in_use()
    if not signs:
        return []
    return [Error(
        f"The outbox is in use ({', '.join(signs)}) but its app is not installed: its tables are "
        "not migrated, `manage.py drain_outbox` is an unknown command and actions are not discovered.",
        hint=f'Add "{OUTBOX_APP}" to INSTALLED_APPS (after "receipts") and run migrate (docs/outbox.md).',
        id="receipts.E002",
    )]


@register(Tags.database)
def mysql_read_committed(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Error]:
    """MySQL/MariaDB under REPEATABLE READ: a claim that lost a race would re-read the receipt
    from a snapshot taken before the winner committed."""
    errors = []
    for alias in databases or []:
        settings_dict = connections[alias].settings_dict
        level = (settings_dict.get("OPTIONS") or {}).get("isolation_level", "read committed")
        if settings_dict["ENGINE"].endswith("mysql") and level == "repeatable read":
            errors.append(Error(
                f"DATABASES[{alias!r}] runs MySQL/MariaDB under REPEATABLE READ, where a claim that "
                "lost a race cannot see the receipt that won it.",
                hint='Use Django\'s default, READ COMMITTED: remove OPTIONS["isolation_level"] or set it '
                'to "read committed" (docs/receipt-store.md: Databases).',
                id="receipts.E003",
            ))
    return errors


@register()
def mysql_atomic_requests(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """MySQL/MariaDB with ATOMIC_REQUESTS: InnoDB deadlocks concurrent claims of one key inside
    the request's transaction (error 1213: a 500 for one of 64 callers in CI)."""
    return [
        Error(
            f"DATABASES[{alias!r}] runs MySQL/MariaDB with ATOMIC_REQUESTS, under which InnoDB "
            "deadlocks concurrent claims of one Idempotency-Key.",
            hint="Turn ATOMIC_REQUESTS off for this database, or wrap the views that need it in "
            "transaction.atomic yourself, inside @idempotent (docs/http-contract.md: Under ATOMIC_REQUESTS).",
            id="receipts.E004",
        )
        for alias, config in settings.DATABASES.items()
        if config.get("ENGINE", "").endswith("mysql") and config.get("ATOMIC_REQUESTS")
    ]


# Our apps, by label: one `0001_initial` each since the chains were squashed.
OUR_APPS = ("idemdash_core", "receipts", "outbox", "webhooks", "idemdash_dashboard", "idemdash_worker", "devtools", "bench")


@register(Tags.database)
def migrations_that_no_longer_exist(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Error]:
    """A database migrated by the chains squashed before the first release: `migrate` would
    take its old tables for the new ones, and every request would fail on a column."""
    ours = {config.label for config in apps.get_app_configs()} & set(OUR_APPS)
    errors = []
    for alias in databases or []:
        try:
            loader = MigrationLoader(connections[alias], ignore_no_migrations=True)
        except DatabaseError:
            continue  # a database that does not answer is said elsewhere, and by migrate itself
        gone = sorted(f"{app}.{name}" for app, name in loader.applied_migrations or {}
                      if app in ours and (app, name) not in loader.disk_migrations)
        if gone:
            errors.append(Error(
                f"The database {alias!r} was migrated by migrations that no longer exist "
                f"({', '.join(gone[:3])}{', ...' if len(gone) > 3 else ''}): its tables are of an "
                "earlier schema.",
                hint="idemdash's migrations were squashed before its first release; drop and recreate this "
                "database (for the embedded default, delete var/idemdash.sqlite3), then migrate.",
                id="receipts.E018",
            ))
    return errors


# What to write instead, for each check of RECEIPTS_OPERATIONS.
POLICY_HINTS = {
    "receipts.E006": 'e.g. {"report.weekly": {"ttl_seconds": 8 * 24 * 3600}}, {"email.welcome": {"ttl_seconds": None}} '
    "(docs/receipt-store.md: Operation policies).",
    "receipts.E017": 'e.g. {"report.*": {"ttl_seconds": 7 * 24 * 3600, "compact_after_seconds": 24 * 3600}} '
    "(docs/receipt-store.md: Compaction).",
}


@register()
def operation_policies(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Each RECEIPTS_OPERATIONS entry refused as a request would refuse it (conf.PolicyRefused):
    its rules (E006), then its compaction window (E017), then its `reconcile`, imported (E006)."""
    operations = setting("RECEIPTS_OPERATIONS")
    if not isinstance(operations, dict):
        return [Error(
            f"RECEIPTS_OPERATIONS must be a dict of operation name or pattern -> policy, got {operations!r}",
            id="receipts.E006",
        )]
    errors = []
    for name in operations:
        try:
            reconciler(policy_for(name))  # an entry's own name matches it exactly
        except PolicyRefused as refused:
            errors += [Error(problem, hint=POLICY_HINTS[refused.check], id=refused.check) for problem in refused.problems]
    return errors
