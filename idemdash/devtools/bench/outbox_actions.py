"""An outbox action for the bench's latency scenario: it does nothing, so the time to its
first attempt is the time the message waited for a worker. Registered only where the bench
app is installed (idemdash.devtools.bench.settings)."""

from typing import Any

from receipts.outbox.actions import ActionContext, outbox_action


@outbox_action("bench.noop")
def noop(payload: Any, ctx: ActionContext) -> int:
    return 200
