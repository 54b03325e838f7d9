/**
 * A client for idemdash's receipts JSON API and outbox API, on `fetch` alone, so it runs on
 * Node 20+, Deno, Bun and in browsers. It does what idemdash_client (clients/python) does for Python:
 * claim / complete / fail / heartbeat / get, and `runOnce`, which runs a function once per
 * key, renews its lease while it runs, and returns the stored result to every later call.
 */

import { IdempotencyError, RequestInProgress, StaleToken, PreviousFailure, ReceiptNotFound, problemError } from "./errors.js";
import type { Problem } from "./errors.js";

export interface ClientOptions {
  /** Seconds to wait for an answer, on top of the server-side wait (default 10). */
  timeoutSeconds?: number;
  /** How long a claim may wait on the server for a running first attempt (default 5; 0: not at all). */
  waitSeconds?: number;
  /** 409s retried by runOnce before RequestInProgress is thrown (default 5). */
  maxInProgressRetries?: number;
  /** 503s and failed connections retried by every call (default 3). */
  maxUnavailableRetries?: number;
  /** The longest wait between retries, in seconds (default 10). */
  maxBackoffSeconds?: number;
  /** Another fetch (a proxy agent, a test double); the global one by default. */
  fetch?: typeof fetch;
}

export interface ClaimOptions {
  leaseSeconds?: number;
  waitSeconds?: number;
}

export interface RunOnceOptions extends ClaimOptions {
  /** What the key stands for: fingerprinted, so reusing the key for another request throws IdempotencyKeyReused. */
  request?: unknown;
  maxInProgressRetries?: number;
}

export type ClaimOutcome = "claimed" | "retried_after_failure" | "lease_takeover" | "replayed";

export interface Claim {
  outcome: ClaimOutcome;
  key: string;
  /** The fencing token (owners only). */
  token?: number;
  leaseExpiresAt?: string;
  attempts?: number;
  /** A replay's: "completed" or "failed". */
  status?: "completed" | "failed";
  response?: unknown;
  error?: string;
  /** The length of the lease this claim got (asked for, else the operation's): what heartbeats renew it for. */
  leaseSeconds?: number;
  /** An owner's: the caller's scope (its API client's). */
  scope?: string;
  /** An owner's: what to send to a provider that honours idempotency keys, the same for every attempt of this claim. */
  downstreamKey?: string;
  replayed: boolean;
}

/** What a receipt or an outbox message is about, as another system names it (a Stripe
 * charge, an order): shown on the dashboard, filterable and searchable by `value`. */
export interface Reference {
  /** A short token: 1 to 64 of lowercase letters, digits and `. _ : -` (`stripe.charge`). */
  kind: string;
  /** 1 to 255 printable characters, no leading or trailing spaces. */
  value: string;
}

/** At most this many references per receipt attempt or message (the server's limit). */
export const MAX_REFERENCES = 20;
const KIND = /^[a-z0-9][a-z0-9_.:-]{0,63}$/;
// What Python's str.isprintable() refuses (the server's rule): control, format (bidi and
// zero-width), surrogate, private-use and unassigned characters, and every separator but the space.
const UNPRINTABLE = /[\p{C}\p{Zl}\p{Zp}]|(?! )\p{Zs}/u;

/** Seconds from a Retry-After header (RFC 9110 10.2.3): delta-seconds, or an HTTP date (the
 * seconds from `now`, never below 0); null when absent or neither. The Python client's
 * idemdash_client/retries.py reads it the same way. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | null {
  const text = value?.trim() ?? "";
  if (text === "") return null;
  if (/^\d+$/.test(text)) return Number(text);
  const when = /^[A-Za-z]{3}, /.test(text) ? Date.parse(text) : NaN; // an IMF-fixdate, not any text Date.parse takes
  return Number.isFinite(when) ? Math.max(0, (when - now) / 1000) : null;
}

/** Seconds to wait after failed try number `attempt` (1 = the first): `base` doubling, at
 * most `cap`, at a random point in the upper half of the step; never shorter than
 * `retryAfter` (capped at `retryAfterMax`), and up to a quarter longer at random. The Python
 * client's idemdash_client/retries.py:backoff, which the server uses too. */
export function backoff(attempt: number, base: number, cap: number, retryAfter?: number, retryAfterMax?: number): number {
  const step = Math.min(cap, base * 2 ** Math.max(0, attempt - 1));
  let delay = step / 2 + (Math.random() * step) / 2;
  if (retryAfter !== undefined) {
    const asked = retryAfterMax === undefined ? retryAfter : Math.min(retryAfter, retryAfterMax);
    delay = Math.max(delay, asked * (1 + Math.random() / 4));
  }
  return delay;
}

/** The reference, checked by the server's rules: a TypeError names the rule it breaks, in
 * the step that refers, rather than a 400 when its result is stored. */
export function reference(kind: string, value: string | number): Reference {
  if (typeof kind !== "string" || !KIND.test(kind)) {
    throw new TypeError("A reference kind is 1 to 64 characters of lowercase letters, digits and . _ : - (such as stripe.charge).");
  }
  const text = typeof value === "number" && Number.isInteger(value) ? String(value) : value;
  if (typeof text !== "string" || text.length < 1 || [...text].length > 255 || UNPRINTABLE.test(text) || text !== text.trim()) {
    throw new TypeError("A reference value is 1 to 255 printable characters, without leading or trailing spaces.");
  }
  return { kind, value: text };
}

/** A receipt as `GET /api/v1/receipts/?key=` gives it (snake_case, as the API writes it). */
export interface Receipt {
  key: string;
  scope: string;
  operation: string;
  status: string;
  retryable: boolean;
  attempts: number;
  fingerprint: string;
  request: unknown;
  response: unknown;
  response_status: number | null;
  error: string;
  lease_expires_at: string | null;
  created_at: string;
  updated_at: string;
  completed_at: string | null;
  expires_at: string | null;
  /** What its attempts referred to, stored with their completions and failures. */
  references: Reference[];
  [member: string]: unknown;
}

export interface OutboxMessage {
  id: number;
  key: string;
  action: string;
  status: string;
  attempts: number;
  next_attempt_at: string;
  created_at: string;
  sent_at: string | null;
  references: Reference[];
  /** False when the same message was enqueued before under this key (nothing was added). */
  created: boolean;
}

/** What runOnce's function gets: `signal` aborts when the lease is lost, so a step that
 * can stop (a fetch given the signal) stops; its result would not be stored anyway. */
export interface RunContext {
  signal: AbortSignal;
  key: string;
  token: number;
  /** 1 for the first attempt; a retry after a failure or a lease takeover counts up. */
  attempt: number;
  /** Send it as the provider's Idempotency-Key: the same for every attempt of this claim, so a
   * re-run after a crash reaches the provider with the key it has already seen. */
  downstreamKey: string;
  /** Attach a reference to what this attempt works on, `refer("stripe.charge", charge.id)`:
   * sent with its completion, or its failure (a TypeError for one the server would refuse). */
  refer(kind: string, value: string | number): void;
}

type Body = Record<string, unknown>;

export class IdempotencyClient {
  readonly waitSeconds: number;
  readonly maxInProgressRetries: number;
  readonly maxUnavailableRetries: number;
  readonly maxBackoffSeconds: number;
  readonly #base: string;
  readonly #token: string;
  readonly #timeoutSeconds: number;
  readonly #fetch: typeof fetch;

  constructor(baseUrl: string, token: string, options: ClientOptions = {}) {
    this.#base = baseUrl.replace(/\/+$/, "");
    this.#token = token;
    this.#timeoutSeconds = options.timeoutSeconds ?? 10;
    this.waitSeconds = options.waitSeconds ?? 5;
    this.maxInProgressRetries = options.maxInProgressRetries ?? 5;
    this.maxUnavailableRetries = options.maxUnavailableRetries ?? 3;
    this.maxBackoffSeconds = options.maxBackoffSeconds ?? 10;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  // --- the endpoints -----------------------------------------------------------------

  /** Claim `key`: ownership (a token), or the stored result of a finished attempt. Throws
   * RequestInProgress while another attempt holds it (after waiting up to `waitSeconds` on the server). */
  async claim(key: string, operation: string, request: unknown = null, options: ClaimOptions = {}): Promise<Claim> {
    const body: Body = { key, operation, request };
    if (options.leaseSeconds !== undefined) body.lease_seconds = options.leaseSeconds;
    const wait = options.waitSeconds ?? this.waitSeconds;
    if (wait) body.wait_seconds = wait;
    const data = await this.#post("/api/v1/receipts/claim", body, wait);
    const policy = data.policy as { lease_seconds?: number } | undefined;
    return {
      outcome: data.outcome as ClaimOutcome,
      key: data.key as string,
      token: data.token as number | undefined,
      leaseExpiresAt: data.lease_expires_at as string | undefined,
      attempts: data.attempts as number | undefined,
      status: data.status as Claim["status"],
      response: data.response,
      error: data.error as string | undefined,
      leaseSeconds: options.leaseSeconds ?? policy?.lease_seconds,
      scope: data.scope as string | undefined,
      downstreamKey: data.downstream_key as string | undefined,
      replayed: data.outcome === "replayed",
    };
  }

  /** Store the result of the attempt holding `token`, and its `references` with it.
   * StaleToken: it no longer owns the key. */
  complete(key: string, token: number, response: unknown, options: { references?: Reference[] } = {}): Promise<Receipt> {
    const body: Body = { key, token, response: response ?? null };
    if (options.references?.length) body.references = options.references;
    return this.#post("/api/v1/receipts/complete", body) as Promise<Receipt>;
  }

  /** Fail the attempt holding `token`, with its `references`; `retryable` unset: the
   * operation's policy decides. */
  fail(
    key: string, token: number, error: string, options: { retryable?: boolean; references?: Reference[] } = {},
  ): Promise<Receipt> {
    const body: Body = { key, token, error: error || "failed" };
    if (options.retryable !== undefined) body.retryable = options.retryable;
    if (options.references?.length) body.references = options.references;
    return this.#post("/api/v1/receipts/fail", body) as Promise<Receipt>;
  }

  /** Renew the lease for `leaseSeconds` from now (the operation's lease when unset). With
   * `timeoutSeconds`, sent once and given up after that long, as runOnce's heartbeat sends
   * each beat (the next beat is its retry); else with the client's timeout and retries. */
  async heartbeat(
    key: string, token: number, options: { leaseSeconds?: number; timeoutSeconds?: number } = {},
  ): Promise<{ key: string; lease_expires_at: string }> {
    const body: Body = { key, token };
    if (options.leaseSeconds !== undefined) body.lease_seconds = options.leaseSeconds;
    const path = "/api/v1/receipts/heartbeat";
    if (options.timeoutSeconds === undefined) return this.#post(path, body) as Promise<{ key: string; lease_expires_at: string }>;
    const once = await this.#request("POST", path, body, options.timeoutSeconds);
    return this.#json(once) as Promise<{ key: string; lease_expires_at: string }>;
  }

  /** The receipt, or null when this client has none with that key (any other 404, such as
   * a base URL without the API, is thrown: it is not an answer about the key). */
  async get(key: string): Promise<Receipt | null> {
    const reply = await this.#send("GET", `/api/v1/receipts/?key=${encodeURIComponent(key)}`);
    try {
      return (await this.#json(reply)) as Receipt;
    } catch (error) {
      if (error instanceof ReceiptNotFound) return null;
      throw error;
    }
  }

  /** Enqueue an outbox message (`POST /api/v1/outbox`): sent by the server's worker, at
   * least once, with `key` passed downstream. Repeating it with the same message is harmless. */
  async enqueue(
    action: string, payload: Record<string, unknown>, key: string, options: { references?: Reference[] } = {},
  ): Promise<OutboxMessage> {
    const body: Body = { action, payload, key };
    if (options.references?.length) body.references = options.references;
    const reply = await this.#send("POST", "/api/v1/outbox", body);
    const message = (await this.#json(reply)) as Omit<OutboxMessage, "created">;
    return { ...message, created: reply.status === 201 };
  }

  // --- running work once -------------------------------------------------------------

  /**
   * Run `fn` once for `key`: a repeat returns the stored result.
   *
   * `fn`'s result must be JSON (undefined is stored as null); every call, the first
   * included, returns it as stored, so the first run and the replays see the same value. If
   * `fn` throws, the receipt is failed (the next call runs `fn` again, unless the operation
   * burns keys: then PreviousFailure) and the error rethrown. While another attempt holds
   * the key, claims again up to `maxInProgressRetries` times, honouring Retry-After, then
   * throws RequestInProgress.
   *
   * While `fn` runs, the lease is renewed every third of its length. If a renewal is
   * refused (the lease was lost: an operator released the key, or no renewal got through
   * for two thirds of the lease and another caller took over), `context.signal` aborts;
   * when `fn` settles its result is not stored and StaleToken is thrown. Renewals are timers:
   * a function that blocks the event loop for longer than a third of its lease loses it.
   */
  async runOnce<T>(
    key: string,
    operation: string,
    fn: (context: RunContext) => T | Promise<T>,
    options: RunOnceOptions = {},
  ): Promise<T> {
    const { claim, sentAt } = await this.#claimPatiently(key, operation, options);
    if (claim.replayed) {
      if (claim.status === "failed") throw PreviousFailure.failed(key, claim.error ?? "", claim.response);
      return claim.response as T;
    }
    const token = claim.token as number;
    const beat = new Heartbeat(this, key, token, claim.leaseSeconds, sentAt);
    const references: Reference[] = [];
    const refer = (kind: string, value: string | number): void => {
      const made = reference(kind, value);
      if (references.some((r) => r.kind === made.kind && r.value === made.value)) return;
      if (references.length >= MAX_REFERENCES) throw new TypeError(`At most ${MAX_REFERENCES} references per attempt.`);
      references.push(made);
    };
    let stored: string;
    try {
      const result = await fn({
        signal: beat.signal,
        key,
        token,
        attempt: claim.attempts ?? 1,
        downstreamKey: claim.downstreamKey ?? "",
        refer,
      });
      stored = JSON.stringify(result === undefined ? null : result); // throws on what JSON cannot hold
    } catch (error) {
      await beat.stop();
      try {
        await this.fail(key, token, describe(error).slice(0, 2000), { references });
      } catch (failed) {
        if (!(failed instanceof IdempotencyError)) throw failed;
        // The original error matters more; the lease lapses by itself.
      }
      throw error;
    }
    await beat.stop();
    if (beat.lost) throw beat.lost; // completing would be refused too: the token is stale for good
    const value = JSON.parse(stored) as T;
    await this.complete(key, token, value, { references });
    return value;
  }

  // --- plumbing ----------------------------------------------------------------------

  async #claimPatiently(key: string, operation: string, options: RunOnceOptions): Promise<{ claim: Claim; sentAt: number }> {
    const retries = options.maxInProgressRetries ?? this.maxInProgressRetries;
    for (let attempt = 0; ; attempt++) {
      const sentAt = performance.now();
      try {
        return { claim: await this.claim(key, operation, options.request ?? null, options), sentAt };
      } catch (error) {
        if (!(error instanceof RequestInProgress) || attempt >= retries) throw error;
        // The backoff from 1 s, never shorter than Retry-After (its jitter keeps a crowd of
        // duplicates refused together from coming back in the same instant).
        await sleep(backoff(attempt + 1, 1, this.maxBackoffSeconds, error.retryAfter ?? 1));
      }
    }
  }

  async #post(path: string, body: Body, waitSeconds = 0): Promise<Record<string, unknown>> {
    return this.#json(await this.#send("POST", path, body, waitSeconds));
  }

  /** Send, retrying a 503 (the server could not reach its database: nothing was stored), a
   * failed connection and a timeout up to `maxUnavailableRetries` times, waiting Retry-After
   * when given, else 0.5 s doubling, at most `maxBackoffSeconds`. Safe for every call, as in
   * the Python client: a claim that committed before its answer was lost meets its own lease
   * (a 409, waited out), and a repeated complete or fail is the same settlement. */
  async #send(method: string, path: string, body?: Body, waitSeconds = 0): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      const last = attempt >= this.maxUnavailableRetries;
      let reply: Response;
      try {
        // The server may hold a claim for waitSeconds: never time out before it answers.
        reply = await this.#request(method, path, body, this.#timeoutSeconds + waitSeconds);
      } catch (error) {
        if (last || !isTransportError(error)) throw error;
        await sleep(this.#backoff(attempt, null));
        continue;
      }
      if (reply.status !== 503 || last) return reply;
      await reply.body?.cancel();
      await sleep(this.#backoff(attempt, reply.headers.get("Retry-After")));
    }
  }

  /** One try: the request, or what fetch rejected with (a TimeoutError after `timeoutSeconds`). */
  #request(method: string, path: string, body: Body | undefined, timeoutSeconds: number): Promise<Response> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.#token}`, Accept: "application/json" };
    if (body) headers["Content-Type"] = "application/json";
    // Whole milliseconds: AbortSignal.timeout throws a RangeError for a fraction (a third of a 1 s lease).
    const signal = AbortSignal.timeout(Math.ceil(timeoutSeconds * 1000));
    return this.#fetch(this.#base + path, { method, headers, body: body ? JSON.stringify(body) : undefined, signal });
  }

  #backoff(attempt: number, retryAfter: string | null): number {
    const asked = parseRetryAfter(retryAfter);
    return backoff(attempt + 1, 0.5, this.maxBackoffSeconds, asked ?? undefined, this.maxBackoffSeconds);
  }

  async #json(reply: Response): Promise<Record<string, unknown>> {
    const text = await reply.text();
    if (reply.status < 400) return JSON.parse(text) as Record<string, unknown>;
    let problem: Problem;
    try {
      problem = JSON.parse(text) as Problem;
      if (typeof problem !== "object" || problem === null) throw new TypeError("not a problem");
    } catch {
      problem = { title: reply.statusText, detail: text.slice(0, 500) };
    }
    throw problemError(reply.status, problem, parseRetryAfter(reply.headers.get("Retry-After")));
  }
}

/** Renews a running attempt's lease every third of it, until stopped; `stop` waits for a
 * renewal in flight, so none lands after the settlement. The beats count from when the claim
 * was sent: a slow answer has already used part of the lease. `lost` is the StaleToken of a
 * refused renewal (and `signal` aborts); a renewal that fails otherwise (the server down, or
 * no answer within a beat) is tried again at the next beat, while the lease still has a third
 * to run. */
class Heartbeat {
  lost: StaleToken | null = null;
  readonly #abort = new AbortController();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #inFlight: Promise<void> = Promise.resolve();
  #stopped = false;
  readonly #interval: number;

  constructor(
    private readonly client: IdempotencyClient,
    private readonly key: string,
    private readonly token: number,
    private readonly leaseSeconds: number | undefined,
    sentAt: number,
  ) {
    this.#interval = Math.max(0.2, (leaseSeconds ?? 30) / 3) * 1000;
    this.#schedule(Math.max(0, sentAt + this.#interval - performance.now()));
  }

  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#inFlight;
  }

  #schedule(delay: number): void {
    this.#timer = setTimeout(() => {
      this.#inFlight = this.#beat();
    }, delay);
  }

  async #beat(): Promise<void> {
    const next = performance.now() + this.#interval;
    try {
      await this.client.heartbeat(this.key, this.token, { leaseSeconds: this.leaseSeconds, timeoutSeconds: this.#interval / 1000 });
    } catch (error) {
      if (error instanceof StaleToken) {
        this.lost = error;
        this.#abort.abort(error);
        return;
      }
      // Anything else (the server down, no answer within the beat, a 503): try at the next beat.
    }
    if (!this.#stopped) this.#schedule(Math.max(0, next - performance.now()));
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return `Error: ${String(error)}`;
}

function isTransportError(error: unknown): boolean {
  // fetch rejects with a TypeError when it cannot connect, and AbortSignal.timeout with a
  // TimeoutError: both mean nothing was answered.
  return error instanceof TypeError || (error instanceof Error && error.name === "TimeoutError");
}

function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}

