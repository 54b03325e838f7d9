// IdempotencyClient against a live idemdash server: tests/clients/test_typescript.py starts
// one (RECEIPTS_MIN_LEASE_SECONDS=1 so leases can lapse quickly, "ledger.*" burning keys on
// failure, "mail.held.*" holding crashed attempts: after_crash "hold") and passes IDEMDASH_URL and IDEMDASH_TOKEN. Without them these tests are skipped.
import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";

import {
  ApiError,
  DatabaseUnavailable,
  IdempotencyClient,
  RequestInProgress,
  InvalidField,
  InvalidMessage,
  IdempotencyKeyReused,
  StaleToken,
  NotFound,
  OutcomeUnknown,
  PreviousFailure,
  ReceiptNotFound,
  Unauthorized,
  backoff,
  makeKey,
  parseRetryAfter,
  toolCallKey,
} from "../dist/index.js";

test("Retry-After is read as seconds or as an HTTP date, as the Python client reads it", () => {
  const now = Date.UTC(2026, 0, 1, 12, 0, 0);
  assert.equal(parseRetryAfter("17", now), 17);
  assert.equal(parseRetryAfter(" 3 ", now), 3);
  assert.equal(parseRetryAfter("Thu, 01 Jan 2026 12:01:30 GMT", now), 90);
  assert.equal(parseRetryAfter("Thu, 01 Jan 2026 11:58:30 GMT", now), 0); // gone by: now
  for (const other of [null, "", "soon", "-5", "1.5", "2026-01-01"]) assert.equal(parseRetryAfter(other, now), null);
});

test("the backoff doubles in the upper half of its step, is never shorter than Retry-After, and spreads a crowd", () => {
  for (const [attempt, step] of [[1, 2], [2, 4], [3, 8], [10, 60]]) {
    const delays = Array.from({ length: 50 }, () => backoff(attempt, 2, 60));
    assert.ok(delays.every((d) => step / 2 <= d && d <= step));
    assert.ok(new Set(delays).size > 1);
  }
  const asked = Array.from({ length: 50 }, () => backoff(1, 2, 60, 30));
  assert.ok(asked.every((d) => 30 <= d && d <= 37.5) && new Set(asked).size > 1);
  const capped = backoff(1, 2, 60, 10000, 120);
  assert.ok(120 <= capped && capped <= 150);
});

const URL_ = process.env.IDEMDASH_URL;
const TOKEN = process.env.IDEMDASH_TOKEN;
const live = { skip: !URL_ || !TOKEN ? "IDEMDASH_URL and IDEMDASH_TOKEN name no live server" : false };
let serial = 0;
/** A key no other test uses: the server's database is shared by the whole file. */
const fresh = (name) => makeKey("ts", name, process.pid, ++serial);
const client = (options = {}) => new IdempotencyClient(URL_, TOKEN, { waitSeconds: 0, ...options });

/** The real fetch, but the requests `drop(path, n)` picks never connect, and every path is logged. */
function flakyFetch(drop) {
  const sent = [];
  let n = 0;
  const fetchFn = async (url, init) => {
    const path = new URL(url).pathname;
    sent.push(path);
    if (drop(path, n++)) throw new TypeError("fetch failed (dropped by the test)");
    return fetch(url, init);
  };
  return { fetchFn, sent };
}

test("claim, complete, replay and get", live, async () => {
  const idem = client();
  const key = fresh("claim");
  const claim = await idem.claim(key, "email.send", { to: "a" });
  assert.equal(claim.outcome, "claimed");
  assert.equal(claim.token, 1);
  assert.equal(claim.replayed, false);
  await idem.complete(key, claim.token, { id: 7 });
  const again = await idem.claim(key, "email.send", { to: "a" });
  assert.deepEqual([again.replayed, again.status, again.response], [true, "completed", { id: 7 }]);
  const receipt = await idem.get(key);
  assert.deepEqual([receipt.status, receipt.attempts, receipt.response], ["completed", 1, { id: 7 }]);
  assert.equal(await idem.get(fresh("unknown")), null);
});

test("runOnce runs fn once across sequential retries and replays its result", live, async () => {
  const idem = client();
  const key = fresh("sequential");
  let calls = 0;
  const send = async () => ({ sent: ++calls, at: new Date(0) });
  const results = [];
  for (let i = 0; i < 3; i++) results.push(await idem.runOnce(key, "email.send", send, { request: { to: "a" } }));
  assert.equal(calls, 1);
  // Every call returns the result as stored (the Date as its JSON), the first one too.
  for (const result of results) assert.deepEqual(result, { sent: 1, at: "1970-01-01T00:00:00.000Z" });
});

test("runOnce hands fn the same downstream key on every attempt of a claim", live, async () => {
  const idem = client();
  const key = fresh("downstream");
  const seen = [];
  const send = async ({ attempt, downstreamKey }) => {
    seen.push([attempt, downstreamKey]);
    if (attempt === 1) throw new Error("the provider timed out");
    return "sent";
  };
  await assert.rejects(idem.runOnce(key, "email.send", send), /timed out/);
  assert.equal(await idem.runOnce(key, "email.send", send), "sent");
  assert.deepEqual(seen.map(([attempt]) => attempt), [1, 2]);
  assert.match(seen[0][1], /^idemdash-[0-9a-f]{32}$/);
  assert.equal(seen[0][1], seen[1][1]);
});

test("N concurrent runOnce calls on one key run fn once and all get its result", live, async () => {
  const idem = client({ waitSeconds: 5 });
  const key = fresh("concurrent");
  let calls = 0;
  const slow = async () => {
    calls++;
    await sleep(300);
    return "charged";
  };
  const results = await Promise.all(Array.from({ length: 8 }, () => idem.runOnce(key, "payment.charge", slow)));
  assert.equal(calls, 1);
  assert.deepEqual(results, Array(8).fill("charged"));
  assert.equal((await idem.get(key)).attempts, 1);
});

test("a held key throws RequestInProgress with Retry-After, and waitSeconds waits for the result", live, async () => {
  const idem = client();
  const key = fresh("held");
  const first = await idem.claim(key, "email.send");
  const busy = await idem.claim(key, "email.send").catch((e) => e);
  assert.ok(busy instanceof RequestInProgress, String(busy));
  assert.equal(busy.status, 409);
  assert.ok(busy.retryAfter >= 1 && busy.retryAfter <= 10, `retryAfter ${busy.retryAfter}`);
  await assert.rejects(idem.runOnce(key, "email.send", () => "never", { maxInProgressRetries: 0 }), RequestInProgress);

  const finishing = sleep(300).then(() => idem.complete(key, first.token, "done"));
  const waited = await idem.runOnce(key, "email.send", () => "never", { waitSeconds: 5 });
  await finishing;
  assert.equal(waited, "done");
});

test("runOnce waits out a lease that lapses and takes the key over", live, async () => {
  const idem = client();
  const key = fresh("takeover");
  await idem.claim(key, "email.send", null, { leaseSeconds: 1 }); // a worker that then died
  assert.equal(await idem.runOnce(key, "email.send", () => "mine"), "mine");
  assert.equal((await idem.get(key)).attempts, 2);
});

test("under after_crash hold a lapsed attempt throws OutcomeUnknown and fn never runs", live, async () => {
  const idem = client();
  const key = fresh("held");
  await idem.claim(key, "mail.held.send", null, { leaseSeconds: 1 }); // a worker that died after its effect
  await sleep(1200);
  let ran = 0;
  await assert.rejects(idem.runOnce(key, "mail.held.send", () => ++ran), (error) => {
    assert.ok(error instanceof OutcomeUnknown && error instanceof ApiError);
    assert.equal(error.status, 409);
    assert.equal(error.type, "urn:idemdash:problem:outcome-unknown");
    return true;
  });
  assert.equal(ran, 0);
  assert.equal((await idem.get(key)).status, "processing");
});

test("another request under a key throws IdempotencyKeyReused (422)", live, async () => {
  const idem = client();
  const key = fresh("mismatch");
  await idem.runOnce(key, "email.send", () => 1, { request: { to: "a" } });
  const error = await idem.runOnce(key, "email.send", () => 2, { request: { to: "b" } }).catch((e) => e);
  assert.ok(error instanceof IdempotencyKeyReused && error instanceof ApiError, String(error));
  assert.equal(error.status, 422);
  assert.equal(error.type, "urn:idemdash:problem:idempotency-key-reused");
});

test("a stale token throws StaleToken, an unknown key ReceiptNotFound, a bad field InvalidField", live, async () => {
  const idem = client();
  const key = fresh("stale");
  const claim = await idem.claim(key, "email.send");
  await idem.complete(key, claim.token, 1);
  await assert.rejects(idem.complete(key, claim.token, 2), StaleToken);
  await assert.rejects(idem.complete(fresh("nowhere"), 1, 2), ReceiptNotFound);
  const invalid = await idem.claim(fresh("lease"), "email.send", null, { leaseSeconds: 0 }).catch((e) => e);
  assert.ok(invalid instanceof InvalidField, String(invalid));
  assert.equal(invalid.problem.field, "lease_seconds");
});

test("get answers null only for a key it has no receipt for, not for a wrong base URL", live, async () => {
  assert.equal(await client().get(fresh("none")), null);
  await assert.rejects(new IdempotencyClient(`${URL_}/api/v0`, TOKEN).get(fresh("none")), NotFound);
  const page = await new IdempotencyClient(`${URL_}/nowhere`, TOKEN).get(fresh("none")).catch((e) => e);
  assert.ok(page instanceof ApiError && page.status === 404, String(page)); // an HTML page, not a problem
});

test("a bad token throws Unauthorized with the problem", live, async () => {
  const idem = new IdempotencyClient(URL_, "idem_wrong", { waitSeconds: 0 });
  const error = await idem.claim(fresh("unauthorized"), "email.send").catch((e) => e);
  assert.ok(error instanceof Unauthorized, String(error));
  assert.equal(error.status, 401);
  assert.ok(error.problem.title);
});

test("when fn throws the receipt fails, the error is rethrown and the next call runs fn again", live, async () => {
  const idem = client();
  const key = fresh("flaky");
  let calls = 0;
  const flaky = async () => {
    if (++calls === 1) throw new RangeError("smtp down");
    return "ok";
  };
  await assert.rejects(idem.runOnce(key, "email.send", flaky), RangeError);
  const failed = await idem.get(key);
  assert.deepEqual([failed.status, failed.error], ["failed", "RangeError: smtp down"]);
  assert.equal(await idem.runOnce(key, "email.send", flaky), "ok");
  assert.equal(calls, 2);
});

test("a failure under an operation that burns keys is not run again: PreviousFailure", live, async () => {
  const idem = client();
  const key = fresh("burn");
  let calls = 0;
  const post = () => {
    calls++;
    throw new Error("rejected");
  };
  await assert.rejects(idem.runOnce(key, "ledger.post", post), /rejected/);
  const error = await idem.runOnce(key, "ledger.post", post).catch((e) => e);
  assert.ok(error instanceof PreviousFailure, String(error));
  assert.equal(error.error, "Error: rejected");
  assert.equal(calls, 1);
});

test("a result that is not JSON fails the receipt", live, async () => {
  const idem = client();
  const key = fresh("bigint");
  await assert.rejects(idem.runOnce(key, "email.send", () => ({ n: 1n })), TypeError);
  assert.equal((await idem.get(key)).status, "failed");
});

test("heartbeats keep the lease of a step four times longer than it", live, async () => {
  const idem = client();
  const other = client({ maxInProgressRetries: 0 });
  const key = fresh("heartbeat");
  const seen = [];
  const build = async () => {
    for (let i = 0; i < 8; i++) {
      await sleep(500); // 4 s under a 1 s lease
      seen.push(await other.claim(key, "report.build").then((c) => c.outcome, (e) => e.constructor.name));
    }
    return "built";
  };
  assert.equal(await idem.runOnce(key, "report.build", build, { leaseSeconds: 1 }), "built");
  assert.deepEqual(seen, Array(8).fill("RequestInProgress"));
  const receipt = await idem.get(key);
  assert.deepEqual([receipt.status, receipt.attempts, receipt.response], ["completed", 1, "built"]);
});

test("a heartbeat left unanswered is given up after a beat, and the next keeps the lease", live, async () => {
  // The first heartbeat is never answered (a server stuck behind a full queue): only its
  // signal ends it. Sent with the client's timeout and retries, it held the beats back past
  // the 3 s lease and another worker took the key over mid-step.
  let heartbeats = 0;
  const fetchFn = (url, init) => {
    if (new URL(url).pathname.endsWith("/heartbeat") && ++heartbeats === 1) {
      return new Promise((_, reject) => init.signal.addEventListener("abort", () => reject(init.signal.reason), { once: true }));
    }
    return fetch(url, init);
  };
  const idem = client({ fetch: fetchFn });
  const other = client({ maxInProgressRetries: 0 });
  const key = fresh("unanswered");
  const seen = [];
  const build = async () => {
    for (let i = 0; i < 9; i++) {
      await sleep(500); // 4.5 s under a 3 s lease, the first beat unanswered
      seen.push(await other.claim(key, "report.build").then((c) => c.outcome, (e) => e.constructor.name));
    }
    return "built";
  };
  assert.equal(await idem.runOnce(key, "report.build", build, { leaseSeconds: 3 }), "built");
  assert.deepEqual(seen, Array(9).fill("RequestInProgress"));
  assert.ok(heartbeats >= 3, `${heartbeats} heartbeats`);
  const receipt = await idem.get(key);
  assert.deepEqual([receipt.status, receipt.attempts], ["completed", 1]);
});

test("a lost lease aborts fn's signal, stores nothing and throws StaleToken", live, async () => {
  const key = fresh("lost");
  let started = 0;
  // Heartbeats do not get through for 1.6 s: the 1 s lease lapses and another worker takes over.
  const { fetchFn, sent } = flakyFetch((path) => path.endsWith("/heartbeat") && performance.now() - started < 1600);
  const idem = client({ fetch: fetchFn, maxBackoffSeconds: 0.05, maxUnavailableRetries: 0 });
  const other = client();
  let aborted = null;
  const step = async ({ signal }) => {
    started = performance.now();
    await sleep(1300);
    assert.equal((await other.claim(key, "report.build", null, { leaseSeconds: 30 })).outcome, "lease_takeover");
    aborted = await new Promise((resolve) => {
      signal.addEventListener("abort", () => resolve(signal.reason), { once: true });
      setTimeout(() => resolve(null), 3000);
    });
    return "late";
  };
  await assert.rejects(idem.runOnce(key, "report.build", step, { leaseSeconds: 1 }), StaleToken);
  assert.ok(aborted instanceof StaleToken, `the signal's reason: ${aborted}`);
  assert.ok(!sent.some((path) => path.endsWith("/complete")), "no completion was tried");
  const receipt = await other.get(key);
  assert.deepEqual([receipt.status, receipt.attempts], ["processing", 2]);
});

test("a connection that fails is retried and the work runs once", live, async () => {
  const { fetchFn, sent } = flakyFetch((_, n) => n < 2);
  const idem = client({ fetch: fetchFn, maxBackoffSeconds: 0.05 });
  let calls = 0;
  assert.equal(await idem.runOnce(fresh("network"), "email.send", () => ++calls && "sent"), "sent");
  assert.equal(calls, 1);
  assert.deepEqual(sent, [...Array(3).fill("/api/v1/receipts/claim"), "/api/v1/receipts/complete"]);
});

test("a 503 is retried after its Retry-After, and the last one is thrown as DatabaseUnavailable", live, async () => {
  // The server's answer when its database is down (receipts/middleware.py), put in front of
  // the real server: nothing was stored, so a retry is safe.
  const unavailable = () =>
    new Response(JSON.stringify({ type: "urn:idemdash:problem:database-unavailable", title: "Database unavailable", status: 503 }), {
      status: 503,
      headers: { "Content-Type": "application/problem+json", "Retry-After": "0" },
    });
  let down = 2;
  const sent = [];
  const fetchFn = async (url, init) => {
    sent.push(new URL(url).pathname);
    return down-- > 0 ? unavailable() : fetch(url, init);
  };
  const idem = client({ fetch: fetchFn });
  assert.equal(await idem.runOnce(fresh("unavailable"), "email.send", () => "sent"), "sent");
  assert.deepEqual(sent, [...Array(3).fill("/api/v1/receipts/claim"), "/api/v1/receipts/complete"]);

  down = 10;
  const error = await client({ fetch: fetchFn, maxUnavailableRetries: 1 }).claim(fresh("down"), "email.send").catch((e) => e);
  assert.ok(error instanceof DatabaseUnavailable, String(error));
  assert.deepEqual([error.status, error.retryAfter], [503, 0]);
});

test("a tool call Python ran is replayed here: the keys are the same", live, async (t) => {
  const runId = process.env.IDEMDASH_PYTHON_RUN;
  if (!runId) return t.skip("tests/clients/test_typescript.py runs the Python side first");
  const args = { q: "lyon", limit: 5 };
  const result = await client().runOnce(toolCallKey(runId, "search", args), "tool.search",
    () => ({ from: "typescript" }), { request: args });
  assert.deepEqual(result, { from: "python" });
});

test("retries are bounded and the last error is thrown", live, async () => {
  const { fetchFn, sent } = flakyFetch(() => true);
  const idem = client({ fetch: fetchFn, maxBackoffSeconds: 0.01, maxUnavailableRetries: 2 });
  await assert.rejects(idem.claim(fresh("dead"), "email.send"), TypeError);
  assert.equal(sent.length, 3);
});

test("the outbox's enqueue: created once, the same message again adds nothing, typed refusals", live, async () => {
  const idem = client();
  const key = fresh("outbox");
  const payload = { url: "https://example.com/hook", json: { order: 42 } };
  const first = await idem.enqueue("http.post", payload, key);
  assert.deepEqual([first.created, first.status, first.key, first.action], [true, "pending", key, "http.post"]);
  const again = await idem.enqueue("http.post", payload, key);
  assert.deepEqual([again.created, again.id], [false, first.id]);
  await assert.rejects(idem.enqueue("http.post", { ...payload, json: { order: 43 } }, key), IdempotencyKeyReused);
  const refused = await idem.enqueue("http.post", { url: "ftp://example.com" }, fresh("ftp")).catch((e) => e);
  assert.ok(refused instanceof InvalidMessage, String(refused));
  assert.equal(refused.problem.field, "payload.url");
});

test("tool calls keyed by toolCallKey run once per run, again in a new conversation", live, async () => {
  const idem = client();
  let calls = 0;
  const search = () => ({ hits: ++calls });
  const args = { q: "lyon", limit: 5 };
  const run = fresh("run");
  assert.deepEqual(await idem.runOnce(toolCallKey(run, "search", args), "tool.search", search, { request: args }), { hits: 1 });
  const reordered = { limit: 5, q: "lyon" };
  assert.deepEqual(await idem.runOnce(toolCallKey(run, "search", reordered), "tool.search", search, { request: reordered }), { hits: 1 });
  assert.deepEqual(await idem.runOnce(toolCallKey(fresh("run"), "search", args), "tool.search", search, { request: args }), { hits: 2 });
});

test("runOnce sends what the step referred to with its completion, and get shows it", live, async () => {
  const idem = client();
  const key = fresh("refer");
  const result = await idem.runOnce(key, "payments.charge", ({ refer }) => {
    refer("stripe.charge", "ch_ts_1");
    refer("order", 1042);
    refer("order", 1042); // once
    return { charged: true };
  });
  assert.deepEqual(result, { charged: true });
  const receipt = await idem.get(key);
  assert.deepEqual(receipt.references, [{ kind: "stripe.charge", value: "ch_ts_1" }, { kind: "order", value: "1042" }]);
});

test("a step that refers, then throws, sends its references with the failure", live, async () => {
  const idem = client();
  const key = fresh("refer-fail");
  await assert.rejects(idem.runOnce(key, "payments.charge", ({ refer }) => {
    refer("stripe.charge", "ch_ts_lost");
    throw new Error("fell over after the charge");
  }), /fell over/);
  const receipt = await idem.get(key);
  assert.deepEqual([receipt.status, receipt.references], ["failed", [{ kind: "stripe.charge", value: "ch_ts_lost" }]]);
});

test("an outbox message is enqueued with its references; a bad one is InvalidField", live, async () => {
  const idem = client();
  const key = fresh("outbox-refs");
  const message = await idem.enqueue("http.post", { url: "https://example.com/hook" }, key, {
    references: [{ kind: "order", value: "42" }],
  });
  assert.deepEqual(message.references, [{ kind: "order", value: "42" }]);
  await assert.rejects(
    idem.enqueue("http.post", { url: "https://example.com/hook" }, fresh("outbox-bad-ref"), { references: [{ kind: "order", value: " 42" }] }),
    InvalidField,
  );
});
