/**
 * Canonical JSON, byte for byte what Python's `idemdash_client.canonical.canonical_json`
 * gives, so that a key hashed from arguments here equals the one hashed in Python.
 *
 * That is RFC 8785 (JCS): object names sorted by their UTF-16 code units, no whitespace,
 * numbers as ECMAScript's Number.prototype.toString writes them, strings escaped as
 * JSON.stringify does. JCS has no form for an integer beyond 2**53 - 1; Python then falls
 * back to `json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)`, and so
 * does this module, for a value holding such an integer as a BigInt (a JavaScript number
 * beyond it is a double, as a Python float would be, and stays JCS).
 */

export type JsonValue =
  | null
  | boolean
  | number
  | bigint
  | string
  | JsonValue[]
  | { [name: string]: JsonValue };

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const LONE_SURROGATE = /\p{Surrogate}/u;

/** The canonical JSON text of `value` (encode it as UTF-8 to hash it). */
export function canonicalJson(value: unknown): string {
  return holdsLargeInteger(value) ? pythonDump(value) : jcs(value);
}

function jcs(value: unknown): string {
  if (typeof value === "number") return jcsNumber(value);
  if (typeof value === "bigint") return value.toString();
  if (Array.isArray(value)) return `[${value.map(jcs).join(",")}]`;
  if (isObject(value)) {
    const names = Object.keys(value).sort(); // the default order compares UTF-16 code units: JCS's
    return `{${names.map((name) => `${jsonString(name)}:${jcs(value[name])}`).join(",")}}`;
  }
  return scalar(value);
}

function jcsNumber(value: number): string {
  if (!Number.isFinite(value)) throw new TypeError(`${value} is not JSON`);
  return Object.is(value, -0) ? "0" : String(value);
}

/** Python's json.dumps with sorted keys: names in code point order, and numbers as Python
 * writes them, a safe integer as an int, any other number as a float's repr. */
function pythonDump(value: unknown): string {
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError(`${value} is not JSON`);
    return Number.isSafeInteger(value) ? String(value === 0 ? 0 : value) : pythonFloat(value);
  }
  if (typeof value === "bigint") return value.toString();
  if (Array.isArray(value)) return `[${value.map(pythonDump).join(",")}]`;
  if (isObject(value)) {
    const names = Object.keys(value).sort(byCodePoint);
    return `{${names.map((name) => `${jsonString(name)}:${pythonDump(value[name])}`).join(",")}}`;
  }
  return scalar(value);
}

/** repr() of a Python float: the same shortest digits as JavaScript, written in fixed
 * notation from 1e-4 up to 1e16 (with ".0" when integral) and as d.ddde+XX beyond. */
function pythonFloat(value: number): string {
  const [mantissa, exp] = Math.abs(value).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const exponent = Number(exp);
  const sign = value < 0 ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
    const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, "0");
    const fraction = digits.slice(exponent + 1);
    return `${sign}${whole}.${fraction || "0"}`;
  }
  const written = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  const magnitude = String(Math.abs(exponent)).padStart(2, "0");
  return `${sign}${written}e${exponent < 0 ? "-" : "+"}${magnitude}`;
}

function byCodePoint(a: string, b: string): number {
  const left = Array.from(a, (c) => c.codePointAt(0)!);
  const right = Array.from(b, (c) => c.codePointAt(0)!);
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    if (left[i] !== right[i]) return left[i] - right[i];
  }
  return left.length - right.length;
}

function scalar(value: unknown): string {
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "string") return jsonString(value);
  throw new TypeError(`${typeof value} is not JSON`);
}

/** JSON.stringify's escaping is JCS's (and Python's with ensure_ascii=False); a lone
 * surrogate is not Unicode text, and Python refuses it, so this does too. */
function jsonString(value: string): string {
  if (LONE_SURROGATE.test(value)) throw new TypeError("a string holds a lone UTF-16 surrogate: it is not Unicode text");
  return JSON.stringify(value);
}

function isObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    throw new TypeError(`${proto.constructor?.name ?? "this object"} is not JSON: pass plain objects and arrays`);
  }
  return true;
}

function holdsLargeInteger(value: unknown): boolean {
  if (typeof value === "bigint") return value > MAX_SAFE || value < -MAX_SAFE;
  if (Array.isArray(value)) return value.some(holdsLargeInteger);
  if (typeof value === "object" && value !== null) return Object.values(value).some(holdsLargeInteger);
  return false;
}
