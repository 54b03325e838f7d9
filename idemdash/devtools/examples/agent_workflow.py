"""A three-step agent workflow that resumes after a crash without repeating a finished step.

Each step runs through `IdempotencyClient.run_once` with a key made from the step's
inputs: the campaign, the search query, the lead. Run it again after a crash and the steps
that finished replay their stored results; only the unfinished step runs.

    IDEMDASH_URL=http://127.0.0.1:8000 IDEMDASH_TOKEN=idem_... \\
        python -m idemdash.devtools.examples.agent_workflow spring-launch "rust consultancies in Lyon"
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

from idemdash_client import IdempotencyClient, make_key


class Steps:
    """The side effects: stand-ins (a real agent would call a search API, an enrichment API
    and an email provider); the receipts around them are the real thing. Subclass to plug in
    real services (the tests count calls here)."""

    def source_lead(self, query: str) -> dict[str, Any]:
        lead_id = hashlib.sha256(query.encode()).hexdigest()[:12]
        return {"id": lead_id, "company": query.title(), "email": f"hello@{lead_id}.example"}

    def enrich(self, lead: dict[str, Any]) -> dict[str, Any]:
        return {**lead, "employees": 42, "industry": "software"}

    def send_email(self, lead: dict[str, Any], template: str) -> dict[str, Any]:
        return {"message_id": f"{template}-{lead['id']}", "to": lead["email"]}


def run_workflow(
    client: IdempotencyClient, campaign: str, query: str, steps: Steps | None = None
) -> dict[str, Any]:
    steps = steps or Steps()
    lead = client.run_once(
        make_key(campaign, "source", query), "lead.source", steps.source_lead, query, request={"query": query}
    )
    enriched = client.run_once(
        make_key(campaign, "enrich", lead["id"]), "lead.enrich", steps.enrich, lead, request=lead
    )
    return client.run_once(make_key(campaign, "email", lead["id"], "welcome"), "email.send", steps.send_email, enriched,
                           "welcome", request={"lead": lead["id"], "template": "welcome"})


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {argv[0]} CAMPAIGN QUERY", file=sys.stderr)
        return 2
    with IdempotencyClient(os.environ["IDEMDASH_URL"], os.environ["IDEMDASH_TOKEN"]) as client:
        print(run_workflow(client, argv[1], argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
