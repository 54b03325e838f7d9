"""`python -m idemdash.devtools.demo_env`: write var/demo.env if it lacks a value and print its path,
for `make demo` to source before anything else runs.

It holds the demo's SECRET_KEY and webhook secrets, each made once, so that sessions and
the demo's endpoints survive restarts. It runs before Django's settings load because the
settings refuse to start without the key it provides (so not as a management command).
Nothing but `make demo` reads the file, so a deployment never gets these values.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

DEMO_VALUES: dict[str, Callable[[], str]] = {
    "SECRET_KEY": lambda: secrets.token_urlsafe(50),
    "STRIPE_WEBHOOK_SECRET": lambda: "whsec_demo_" + secrets.token_hex(16),
    "SHOPIFY_WEBHOOK_SECRET": lambda: "shpss_demo_" + secrets.token_hex(16),
    # The demo's own tuning, not production's defaults (8 attempts, 30 s doubling): an event
    # the staged bug breaks (idemdash.devtools.demo) goes dead within about two sweeps, not hours.
    "WEBHOOKS_MAX_ATTEMPTS": lambda: "3",
    "WEBHOOKS_BACKOFF_BASE": lambda: "5",
}
HEADER = "# Secrets and settings for `make demo` only, each made once. A value set in the environment wins."


def write_demo_env(path: Path) -> Path:
    """Add whatever value the file lacks (a file from an older release has no SECRET_KEY),
    keep the rest. `:=` assigns only when the variable is unset or empty, so a value already
    in the environment wins."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "r+") as handle:
        text = handle.read()
        lines = [] if text else [HEADER]
        for name, make in DEMO_VALUES.items():
            if f"${{{name}:=" not in text:
                lines += [f': "${{{name}:={make()}}}"', f"export {name}"]
        if lines:
            handle.write("\n".join(lines) + "\n")
    return path


if __name__ == "__main__":
    var_dir = Path(os.environ.get("IDEMDASH_VAR_DIR", Path(__file__).resolve().parents[2] / "var"))
    sys.stdout.write(f"{write_demo_env(var_dir / 'demo.env')}\n")
