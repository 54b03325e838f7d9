"""The receipts app's settings (optional flat `RECEIPTS_*` names, read through `setting`)
and operation policies (`policy_for`)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

# The usual nouns of money movement, as the first part of a name: `payments.capture` is financial.
FINANCIAL_NOUNS = ("payment", "refund", "payout", "charge", "capture", "invoice", "transfer")

DEFAULTS: dict[str, Any] = {
    "RECEIPTS_DEFAULT_TTL_SECONDS": 24 * 3600,
    "RECEIPTS_FINANCIAL_TTL_SECONDS": 7 * 24 * 3600,
    "RECEIPTS_LEASE_SECONDS": 30,
    "RECEIPTS_MAX_WAIT_SECONDS": 30,
    # Callers one process lets wait at once: fewer than its threads, which completions need too.
    "RECEIPTS_MAX_WAITERS": 4,
    "RECEIPTS_MAX_LEASE_SECONDS": 3600,
    # The shortest lease a JSON API caller may ask for: a shorter one leaves a heartbeat too
    # little room on a loaded server (issue 19: heartbeats queued 2 to 7 s behind 600 claims).
    "RECEIPTS_MIN_LEASE_SECONDS": 15,
    # Operation names or patterns whose receipts are financial (longer TTL, archived before purge).
    "RECEIPTS_FINANCIAL_OPERATIONS": [f"{noun}{s}.*" for noun in FINANCIAL_NOUNS for s in ("", "s")],
    # Operation name or pattern -> policy (docs/receipt-store.md, "Operation policies").
    "RECEIPTS_OPERATIONS": {},
    # The observer of unprotected write routes (receipts/observe.py); a flush interval 0: by hand.
    "RECEIPTS_OBSERVE_WINDOW_SECONDS": 600,
    "RECEIPTS_OBSERVE_MAX_BODY_BYTES": 1024 * 1024,
    "RECEIPTS_OBSERVE_FLUSH_SECONDS": 2,
    "RECEIPTS_OBSERVE_RETENTION_HOURS": 24,
    # The same caller's same request under a new key within this is a fresh-key retry.
    "RECEIPTS_FRESH_KEY_WINDOW_SECONDS": 600,
    "RECEIPTS_ATTEMPT_RETENTION_DAYS": 35,
    "RECEIPTS_AUDIT_RETENTION_DAYS": 365,
    "RECEIPTS_BULK_RUN_RETENTION_DAYS": 90,
    "RECEIPTS_ROLLUP_RETENTION_DAYS": 90,
    "RECEIPTS_RETENTION_BATCH_SIZE": 1000,
    # Header names a replay leaves out besides receipts/responses.py:NOT_REPLAYED.
    "RECEIPTS_REPLAY_EXCLUDED_HEADERS": [],
    # receipts.middleware answers these paths with problem+json whatever the Accept header.
    "RECEIPTS_JSON_PATH_PREFIXES": ["/api/", "/webhooks/"],
    # The page DatabaseUnavailableMiddleware shows a browser.
    "RECEIPTS_UNAVAILABLE_TEMPLATE": "503.html",
}


def setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS[name])


@dataclass(frozen=True)
class Policy:
    operation: str
    ttl: timedelta | None  # None: permanent
    lease: timedelta
    financial: bool
    burn_on_failure: bool
    # After a lapsed lease: "rerun" takes it over; "hold" answers outcome-unknown until resolved.
    after_crash: str = "rerun"
    reconcile: str | None = None
    # The RECEIPTS_OPERATIONS key and RECEIPTS_FINANCIAL_OPERATIONS entry that matched.
    rule: str | None = None
    financial_pattern: str | None = None
    # How long a completed receipt keeps its bodies (receipts/compaction.py); None: kept whole.
    compact_after: timedelta | None = None
    # The same request under a new key: "allow" counts it, "refuse" answers 409 (receipts/fresh_keys.py).
    fresh_key: str = "allow"

    @property
    def on_failure(self) -> str:
        return "burn" if self.burn_on_failure else "retry"

    @property
    def permanent(self) -> bool:
        return self.ttl is None

    @property
    def ttl_seconds(self) -> int | None:
        return None if self.ttl is None else int(self.ttl.total_seconds())

    def expires_at(self, now: datetime) -> datetime | None:
        """When a receipt claimed now expires; None: never (receipts/rules.py: LIVE)."""
        return None if self.ttl is None else now + self.ttl

    def as_dict(self) -> dict[str, Any]:
        return {
            "ttl_seconds": self.ttl_seconds,
            "lease_seconds": int(self.lease.total_seconds()),
            "financial": self.financial,
            "on_failure": self.on_failure,
            "after_crash": self.after_crash,
            "compact_after_seconds": None if self.compact_after is None else int(self.compact_after.total_seconds()),
            "fresh_key": self.fresh_key,
            "matched": {
                "RECEIPTS_OPERATIONS": self.rule,
                "RECEIPTS_FINANCIAL_OPERATIONS": self.financial_pattern,
            },
        }

    def matched(self) -> str:
        """Where this policy came from, in words."""
        parts = []
        if self.rule is not None:
            parts.append(f"RECEIPTS_OPERATIONS[{self.rule!r}]")
        if self.financial_pattern is not None:
            parts.append(f"RECEIPTS_FINANCIAL_OPERATIONS {self.financial_pattern!r}")
        return ", ".join(parts) or "defaults (no pattern matched)"


def _first_match(operation: str, patterns: Any) -> str | None:
    if operation in patterns:
        return operation
    return next((p for p in patterns if fnmatch.fnmatchcase(operation, p)), None)


def _positive_seconds(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


RULE_KEYS = frozenset(
    {"financial", "ttl_seconds", "lease_seconds", "on_failure", "after_crash", "reconcile", "compact_after_seconds",
     "fresh_key"}
)


class PolicyRefused(ImproperlyConfigured):
    """An operation policy that cannot be applied: its problems, and the system check's id for
    them (receipts/checks.py:operation_policies says them at start-up, a request raises this)."""

    def __init__(self, problems: list[str], check: str = "receipts.E006") -> None:
        super().__init__("; ".join(problems))
        self.problems = problems
        self.check = check


def rule_problems(name: str, rule: Any) -> list[str]:
    """What is wrong with one RECEIPTS_OPERATIONS entry, in words: for the system check and policy_for."""
    where = f"RECEIPTS_OPERATIONS[{name!r}]"
    if not isinstance(rule, dict):
        return [f"{where} must be a dict, got {rule!r}"]
    problems = []
    if "ttl_seconds" in rule and not (rule["ttl_seconds"] is None or _positive_seconds(rule["ttl_seconds"])):
        problems.append(
            f"{where}['ttl_seconds'] must be a positive whole number of seconds, or None for a permanent "
            f"receipt, got {rule['ttl_seconds']!r}"
        )
    if "lease_seconds" in rule and not _positive_seconds(rule["lease_seconds"]):
        problems.append(f"{where}['lease_seconds'] must be a positive whole number of seconds, got {rule['lease_seconds']!r}")
    for name, (default, other) in CHOICES.items():
        if rule.get(name, default) not in (default, other):
            problems.append(f"{where}[{name!r}] must be {default!r} or {other!r}, got {rule[name]!r}")
    after_crash = rule.get("after_crash", "rerun")
    reconcile = rule.get("reconcile")
    if reconcile is not None and (after_crash != "hold" or not isinstance(reconcile, str)):
        problems.append(f"{where}['reconcile'] is the dotted path of a function, and is asked only under 'after_crash': 'hold'")
    unknown = sorted(map(repr, set(rule) - RULE_KEYS))
    if unknown:  # a misspelt rule would otherwise leave its operation on the defaults unnoticed
        problems.append(f"{where} has no setting {', '.join(unknown)}: it takes {', '.join(sorted(RULE_KEYS))}")
    return problems


def compaction_problem(name: str | None, compact_after: Any, ttl_seconds: int | None) -> str | None:
    """What is wrong with an entry's `compact_after_seconds` given its operation's TTL, or None."""
    if compact_after is None:
        return None
    where = f"RECEIPTS_OPERATIONS[{name!r}]['compact_after_seconds']"
    if not _positive_seconds(compact_after):
        return f"{where} must be a positive whole number of seconds, or None to keep bodies whole, got {compact_after!r}"
    if ttl_seconds is not None and compact_after >= ttl_seconds:
        return f"{where} is {compact_after}, not shorter than the operation's TTL of {ttl_seconds} seconds"
    return None


@lru_cache(maxsize=1024)
def policy_for(operation: str) -> Policy:
    rules: dict[str, dict[str, Any]] = setting("RECEIPTS_OPERATIONS")
    rule_name = _first_match(operation, rules)
    rule = rules[rule_name] if rule_name is not None else {}
    problems = rule_problems(rule_name, rule) if rule_name is not None else []
    if problems:
        raise PolicyRefused(problems)
    financial_pattern = _first_match(operation, setting("RECEIPTS_FINANCIAL_OPERATIONS"))
    financial = bool(rule["financial"]) if "financial" in rule else financial_pattern is not None
    if not financial:
        financial_pattern = None  # a rule said "financial": False; the pattern did not decide
    default_ttl = setting("RECEIPTS_FINANCIAL_TTL_SECONDS" if financial else "RECEIPTS_DEFAULT_TTL_SECONDS")
    on_failure = rule.get("on_failure", "retry")
    ttl_seconds = rule.get("ttl_seconds", default_ttl)
    after_crash = rule.get("after_crash", "rerun")
    reconcile = rule.get("reconcile")
    compact_after = rule.get("compact_after_seconds")
    problem = compaction_problem(rule_name, compact_after, ttl_seconds)
    if problem:
        raise PolicyRefused([problem], "receipts.E017")
    return Policy(
        operation=operation,
        ttl=None if ttl_seconds is None else timedelta(seconds=int(ttl_seconds)),
        lease=timedelta(seconds=int(rule.get("lease_seconds", setting("RECEIPTS_LEASE_SECONDS")))),
        financial=financial,
        burn_on_failure=on_failure == "burn",
        after_crash=after_crash,
        reconcile=reconcile,
        compact_after=None if compact_after is None else timedelta(seconds=compact_after),
        fresh_key=rule.get("fresh_key", "allow"),
        rule=rule_name,
        financial_pattern=financial_pattern,
    )


# The settings of a rule that take one of two values, the default first.
CHOICES = {"on_failure": ("retry", "burn"), "after_crash": ("rerun", "hold"), "fresh_key": ("allow", "refuse")}


def reconciler(policy: Policy) -> Any:
    """The operation's reconcile function, imported, or None."""
    if policy.reconcile is None:
        return None
    try:
        found = import_string(policy.reconcile)
    except ImportError as exc:
        raise PolicyRefused([f"RECEIPTS_OPERATIONS[{policy.rule!r}]['reconcile']: {exc}"]) from None
    if not callable(found):
        raise PolicyRefused([f"RECEIPTS_OPERATIONS[{policy.rule!r}]['reconcile'] names {found!r}, not a function"])
    return found


def _clear_cache(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith("RECEIPTS_"):
        policy_for.cache_clear()


setting_changed.connect(_clear_cache)
