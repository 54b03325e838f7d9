/**
 * Keys made from an intent's inputs, identical to Python's `make_key` and `tool_call_key`
 * (clients/python/idemdash_client/keys.py), checked against the shared vectors in clients/test-vectors/.
 */

import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex } from "@noble/hashes/utils.js";

import { canonicalJson } from "./canonical.js";

export const MAX_KEY_LENGTH = 255;
const PRINTABLE = /^[\x20-\x7e]{1,255}$/;
const NOT_PRINTABLE = /[^\x20-\x7e]/u; // `u`: one "_" for a character beyond U+FFFF, as Python

/** A part of a key: Python writes a string or an int the same way (str()); a number that is
 * not an integer, a boolean or null it writes otherwise ("1.0", "True", "None"), so those
 * are refused rather than given a key Python would not. */
export type KeyPart = string | number | bigint;

/**
 * The parts joined with ":"; when that is too long or not printable ASCII, a readable
 * prefix (each other character as "_") and the sha256 of the UTF-8 text.
 */
export function makeKey(...parts: KeyPart[]): string {
  if (parts.length === 0) throw new TypeError("makeKey needs at least one part");
  const text = parts.map(keyPart).join(":");
  if (PRINTABLE.test(text)) return text;
  const digest = sha256Hex(text);
  const readable = Array.from(text, (c) => (NOT_PRINTABLE.test(c) ? "_" : c))
    .slice(0, MAX_KEY_LENGTH - digest.length - 1)
    .join("");
  return readable ? `${readable}:${digest}` : digest;
}

/** SHA-256 of the UTF-8 text, lowercase hex, as Python's hashlib gives it. Synchronous (the
 * one hash every runtime has, crypto.subtle.digest, is not), so makeKey stays a plain function. */
function sha256Hex(text: string): string {
  return bytesToHex(sha256(new TextEncoder().encode(text)));
}

/**
 * The key of an agent's tool call within one run or conversation: the same tool with the
 * same arguments (in any key order) in the same run gives the same key. There is no
 * unscoped form: a key outliving its run would answer the same call in a new conversation
 * with the old result, for as long as the receipt is kept.
 */
export function toolCallKey(runId: KeyPart, toolName: string, args: unknown): string {
  return makeKey(runId, toolName, sha256Hex(canonicalJson(args)));
}

function keyPart(part: KeyPart): string {
  if (typeof part === "string") {
    if (/\p{Surrogate}/u.test(part)) throw new TypeError("a key part holds a lone UTF-16 surrogate");
    return part;
  }
  if (typeof part === "bigint") return part.toString();
  if (typeof part === "number" && Number.isInteger(part)) {
    if (!Number.isSafeInteger(part)) throw new TypeError(`${part} is beyond 2**53 - 1: pass it as a BigInt`);
    return String(part === 0 ? 0 : part);
  }
  throw new TypeError(`a key part must be a string, an integer or a BigInt, not ${String(part)}`);
}
