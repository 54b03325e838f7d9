// The seed workflow of docs/typescript.md (examples/agent-workflow.ts) against a live server:
// after a crash while sending, the rerun replays the finished steps and runs only the send.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";

import { IdempotencyClient } from "../dist/index.js";
import { Steps, runWorkflow } from "../examples/dist/agent-workflow.js";

const URL_ = process.env.IDEMDASH_URL;
const TOKEN = process.env.IDEMDASH_TOKEN;
const live = { skip: !URL_ || !TOKEN ? "IDEMDASH_URL and IDEMDASH_TOKEN name no live server" : false };

class CountingSteps extends Steps {
  calls = [];
  constructor(crashOnSend) {
    super();
    this.crashOnSend = crashOnSend;
  }
  async sourceLead(query) {
    this.calls.push("source");
    return super.sourceLead(query);
  }
  async enrich(lead) {
    this.calls.push("enrich");
    return super.enrich(lead);
  }
  async sendEmail(lead, template) {
    this.calls.push("send");
    if (this.crashOnSend) throw new Error("agent crashed while sending");
    return super.sendEmail(lead, template);
  }
}

test("the workflow resumes after a crash without repeating finished steps", live, async () => {
  const idem = new IdempotencyClient(URL_, TOKEN, { waitSeconds: 0 });
  const campaign = `spring-${process.pid}`;
  const first = new CountingSteps(true);
  await assert.rejects(runWorkflow(idem, campaign, "rust consultancies in lyon", first), /crashed/);
  assert.deepEqual(first.calls, ["source", "enrich", "send"]);

  const second = new CountingSteps(false);
  const result = await runWorkflow(idem, campaign, "rust consultancies in lyon", second);
  assert.deepEqual(second.calls, ["send"]); // steps 1 and 2 replayed from their receipts
  assert.deepEqual(result, { messageId: "welcome-rust-consultancies-in-ly", to: "hello@rust-consultancies-in-ly.example" });

  const third = new CountingSteps(false);
  assert.deepEqual(await runWorkflow(idem, campaign, "rust consultancies in lyon", third), result);
  assert.deepEqual(third.calls, []);
});

test("the workflow runs as the command the docs give", live, async () => {
  const script = fileURLToPath(new URL("../examples/dist/agent-workflow.js", import.meta.url));
  const run = () => promisify(execFile)(process.execPath, [script, `cli-${process.pid}`, "rust consultancies in Lyon"], {
    env: { ...process.env, IDEMDASH_URL: URL_, IDEMDASH_TOKEN: TOKEN },
    timeout: 60_000,
  });
  const { stdout } = await run();
  assert.deepEqual(JSON.parse(stdout), { messageId: "welcome-rust-consultancies-in-ly", to: "hello@rust-consultancies-in-ly.example" });
  assert.equal((await run()).stdout, stdout);
});
