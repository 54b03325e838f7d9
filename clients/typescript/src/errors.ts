/**
 * Typed errors: every problem type idemdash answers with (docs/http-contract.md, "Problem
 * types") has its class, so a caller writes `catch (e) { if (e instanceof IdempotencyKeyReused) ... }`
 * instead of comparing URNs. All are ApiErrors carrying the status and the parsed problem.
 */

export const PROBLEM_PREFIX = "urn:idemdash:problem:";

/** A problem+json body (RFC 9457), with idemdash's extension members (`field`, `cause`,
 * `retry_after`, ...). */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  [member: string]: unknown;
}

export class IdempotencyError extends Error {
  override name = "IdempotencyError";
}

/** The API answered with a problem; `problem` is its parsed body. */
export class ApiError extends IdempotencyError {
  override name = "ApiError";
  readonly status: number;
  readonly problem: Problem;
  /** Seconds from the Retry-After header (409, 429, 503), else null. */
  readonly retryAfter: number | null;

  constructor(status: number, problem: Problem, retryAfter: number | null = null) {
    super(`${status} ${problem.title ?? ""}: ${problem.detail ?? ""}`.trim());
    this.status = status;
    this.problem = problem;
    this.retryAfter = retryAfter;
  }

  /** The problem's type URI, such as "urn:idemdash:problem:stale-token". */
  get type(): string {
    return String(this.problem.type ?? "");
  }
}

// One class per problem type, in the order of the table in docs/http-contract.md.
export class IdempotencyKeyMissing extends ApiError { override name = "IdempotencyKeyMissing"; }
export class IdempotencyKeyInvalid extends ApiError { override name = "IdempotencyKeyInvalid"; }
export class InvalidJson extends ApiError { override name = "InvalidJson"; }
/** A field is missing, unknown or invalid; `problem.field` says which. */
export class InvalidField extends ApiError { override name = "InvalidField"; }
export class MalformedBody extends ApiError { override name = "MalformedBody"; }
export class InvalidParameter extends ApiError { override name = "InvalidParameter"; }
export class MalformedRequest extends ApiError { override name = "MalformedRequest"; }
/** No, unknown or revoked bearer token. */
export class Unauthorized extends ApiError { override name = "Unauthorized"; }
export class BadWindow extends ApiError { override name = "BadWindow"; }
export class WebhookRejected extends ApiError { override name = "WebhookRejected"; }
export class Forbidden extends ApiError { override name = "Forbidden"; }
export class WebhookEndpointNotFound extends ApiError { override name = "WebhookEndpointNotFound"; }
export class ReceiptNotFound extends ApiError { override name = "ReceiptNotFound"; }
export class NotFound extends ApiError { override name = "NotFound"; }
export class MethodNotAllowed extends ApiError { override name = "MethodNotAllowed"; }
/** Another attempt holds the lease on this key; `retryAfter` says when to ask again. */
export class RequestInProgress extends ApiError { override name = "RequestInProgress"; }
/** The key's last attempt stopped before it settled and may have had its effect; its
 * operation holds such keys (`after_crash: "hold"`) until the operation's reconcile function
 * or an operator resolves them. Retrying does not help until then: do not retry it blindly. */
export class OutcomeUnknown extends ApiError { override name = "OutcomeUnknown"; }
/** This caller made the same request under another key within the window, and the operation
 * refuses it under a new one (`fresh_key: "refuse"`); nothing ran. `problem.first_key` is the
 * key to send it with to get the first attempt's result. Do not retry it under a new key. */
export class FreshKeyRetry extends ApiError { override name = "FreshKeyRetry"; }
/** The key's operation ran, but compaction dropped its stored response (the operation's
 * `compact_after_seconds`); it will not run again. `problem.original_status` is the status it
 * answered; look the result up where the operation keeps it. Do not retry it. */
export class ReceiptCompacted extends ApiError { override name = "ReceiptCompacted"; }
/** A decorated view outlived its lease and another attempt took over. */
export class LeaseLost extends ApiError { override name = "LeaseLost"; }
/** Our fencing token no longer owns the receipt (the lease was taken over, an operator
 * released it, or it was settled): the result is not stored. */
export class StaleToken extends ApiError { override name = "StaleToken"; }
export class LengthRequired extends ApiError { override name = "LengthRequired"; }
export class PayloadTooLarge extends ApiError { override name = "PayloadTooLarge"; }
export class UnsupportedMediaType extends ApiError { override name = "UnsupportedMediaType"; }
export class TooManyBadTokens extends ApiError { override name = "TooManyBadTokens"; }
/** The key was used before with a different request (or, in the outbox, another message):
 * a bug in how keys are made. */
export class IdempotencyKeyReused extends ApiError { override name = "IdempotencyKeyReused"; }
/** An outbox message with a bad key, an unknown action or a payload its action could never
 * send; `problem.field` names the part. */
export class InvalidMessage extends ApiError { override name = "InvalidMessage"; }
export class UriTooLong extends ApiError { override name = "UriTooLong"; }
export class HeaderFieldsTooLarge extends ApiError { override name = "HeaderFieldsTooLarge"; }
export class NotImplemented extends ApiError { override name = "NotImplemented"; }
export class InternalError extends ApiError { override name = "InternalError"; }
/** The key's first attempt failed and its operation burns keys on failure: it is not run
 * again. Over HTTP the replay of such a failure that stored no response; from `runOnce`
 * (`PreviousFailure.failed`), with the key, its stored error and its stored response. */
export class PreviousFailure extends ApiError {
  override name = "PreviousFailure";
  key: string | null = null;
  error = "";
  response: unknown = null;

  static failed(key: string, error: string, response: unknown): PreviousFailure {
    const detail = `${JSON.stringify(key)} failed before and is not retried: ${error}`;
    const failure = new PreviousFailure(500, { type: PROBLEM_PREFIX + "previous-failure", title: "Previous failure", detail });
    Object.assign(failure, { key, error, response });
    return failure;
  }
}
/** The server could not reach its database; nothing was stored. Retried by every call. */
export class DatabaseUnavailable extends ApiError { override name = "DatabaseUnavailable"; }

type ApiErrorClass = new (status: number, problem: Problem, retryAfter?: number | null) => ApiError;

/** Each problem type's slug (after "urn:idemdash:problem:") and its class. */
export const PROBLEM_ERRORS: Readonly<Record<string, ApiErrorClass>> = Object.freeze({
  "idempotency-key-missing": IdempotencyKeyMissing,
  "idempotency-key-invalid": IdempotencyKeyInvalid,
  "invalid-json": InvalidJson,
  "invalid-field": InvalidField,
  "malformed-body": MalformedBody,
  "invalid-parameter": InvalidParameter,
  "malformed-request": MalformedRequest,
  unauthorized: Unauthorized,
  "bad-window": BadWindow,
  "webhook-rejected": WebhookRejected,
  forbidden: Forbidden,
  "webhook-endpoint-not-found": WebhookEndpointNotFound,
  "receipt-not-found": ReceiptNotFound,
  "not-found": NotFound,
  "method-not-allowed": MethodNotAllowed,
  "request-in-progress": RequestInProgress,
  "outcome-unknown": OutcomeUnknown,
  "fresh-key-retry": FreshKeyRetry,
  "receipt-compacted": ReceiptCompacted,
  "lease-lost": LeaseLost,
  "stale-token": StaleToken,
  "length-required": LengthRequired,
  "payload-too-large": PayloadTooLarge,
  "unsupported-media-type": UnsupportedMediaType,
  "too-many-bad-tokens": TooManyBadTokens,
  "idempotency-key-reused": IdempotencyKeyReused,
  "invalid-message": InvalidMessage,
  "uri-too-long": UriTooLong,
  "header-fields-too-large": HeaderFieldsTooLarge,
  "not-implemented": NotImplemented,
  "internal-error": InternalError,
  "previous-failure": PreviousFailure,
  "database-unavailable": DatabaseUnavailable,
});

/** The typed error for a problem answer; a type we do not know (or a body that is not a
 * problem, such as a proxy's HTML page) gives a plain ApiError. */
export function problemError(status: number, problem: Problem, retryAfter: number | null = null): ApiError {
  const type = String(problem.type ?? "");
  const slug = type.startsWith(PROBLEM_PREFIX) ? type.slice(PROBLEM_PREFIX.length) : "";
  const ErrorClass = Object.hasOwn(PROBLEM_ERRORS, slug) ? PROBLEM_ERRORS[slug] : ApiError;
  return new ErrorClass(status, problem, retryAfter);
}
