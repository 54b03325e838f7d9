/**
 * The seed workflow in TypeScript: a three-step agent job (source a lead, enrich it, send
 * the welcome email) that resumes after a crash without repeating a finished step. Each
 * step runs through `runOnce` with a key made from the step's inputs; run it again after a
 * crash and the finished steps replay their stored results: only the unfinished one runs.
 *
 *     IDEMDASH_URL=http://127.0.0.1:8000 IDEMDASH_TOKEN=idem_... \
 *         node examples/dist/agent-workflow.js spring-launch "rust consultancies in Lyon"
 *
 * The side effects are stand-ins (a real agent calls a search API, an enrichment API and an
 * email provider); the receipts around them are the real thing. The same workflow in Python
 * is idemdash/devtools/examples/agent_workflow.py.
 */

import { IdempotencyClient, makeKey } from "@idemdash/client";

export interface Lead {
  id: string;
  company: string;
  email: string;
  employees?: number;
}

/** The side effects: replace them with real services (the tests count calls here). */
export class Steps {
  async sourceLead(query: string): Promise<Lead> {
    const id = query.toLowerCase().replace(/[^a-z0-9]+/g, "-").slice(0, 24);
    return { id, company: query, email: `hello@${id}.example` };
  }

  async enrich(lead: Lead): Promise<Lead> {
    return { ...lead, employees: 42 };
  }

  async sendEmail(lead: Lead, template: string): Promise<{ messageId: string; to: string }> {
    return { messageId: `${template}-${lead.id}`, to: lead.email };
  }
}

export async function runWorkflow(idem: IdempotencyClient, campaign: string, query: string, steps = new Steps()) {
  const lead = await idem.runOnce(makeKey(campaign, "source", query), "lead.source",
    () => steps.sourceLead(query), { request: { query } });
  const enriched = await idem.runOnce(makeKey(campaign, "enrich", lead.id), "lead.enrich",
    () => steps.enrich(lead), { request: lead });
  return idem.runOnce(makeKey(campaign, "email", lead.id, "welcome"), "email.send",
    () => steps.sendEmail(enriched, "welcome"), { request: { lead: lead.id, template: "welcome" } });
}

async function main(argv: string[]): Promise<number> {
  if (argv.length !== 2) {
    console.error("usage: agent-workflow CAMPAIGN QUERY");
    return 2;
  }
  const idem = new IdempotencyClient(process.env.IDEMDASH_URL!, process.env.IDEMDASH_TOKEN!);
  console.log(JSON.stringify(await runWorkflow(idem, argv[0], argv[1])));
  return 0;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await main(process.argv.slice(2));
}
