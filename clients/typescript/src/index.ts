export { IdempotencyClient, MAX_REFERENCES, backoff, parseRetryAfter, reference } from "./client.js";
export type { Claim, ClaimOptions, ClaimOutcome, ClientOptions, OutboxMessage, Receipt, Reference, RunContext, RunOnceOptions } from "./client.js";
export { canonicalJson } from "./canonical.js";
export type { JsonValue } from "./canonical.js";
export { makeKey, toolCallKey, MAX_KEY_LENGTH } from "./keys.js";
export type { KeyPart } from "./keys.js";
export * from "./errors.js";
