// makeKey, toolCallKey and canonicalJson against the shared vectors that Python's make_key,
// tool_call_key and canonical_json wrote (clients/test-vectors/keys.json): byte-identical keys.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import * as client from "../dist/index.js";
import { mismatches, parseWithBigInts } from "./vectors.js";

const { canonicalJson, makeKey, toolCallKey } = client;

const vectors = parseWithBigInts(readFileSync(new URL("../../test-vectors/keys.json", import.meta.url), "utf8"));

test("the vectors hold BigInts where Python has integers beyond a double", () => {
  assert.ok(vectors.make_key.some((c) => c.parts.some((p) => typeof p === "bigint")));
  assert.ok(vectors.tool_call_key.some((c) => c.canonical.includes("9007199254740993")));
});

for (const { parts, key } of vectors.make_key) {
  test(`makeKey(${JSON.stringify(parts, (_, v) => (typeof v === "bigint" ? `${v}n` : v)).slice(0, 60)}) is Python's`, () => {
    assert.equal(makeKey(...parts), key);
  });
}

for (const { run_id, tool_name, arguments: args, canonical, key } of vectors.tool_call_key) {
  test(`toolCallKey for ${String(run_id).slice(0, 20)} / ${tool_name} is Python's, canonical JSON and all`, () => {
    assert.equal(canonicalJson(args), canonical);
    assert.equal(toolCallKey(run_id, tool_name, args), key);
  });
}

test("every number in the vectors is written as Python's canonical_json writes it", () => {
  const wrong = vectors.numbers.filter(({ value, canonical }) => canonicalJson(value) !== canonical);
  assert.deepEqual(wrong, []);
  assert.equal(vectors.numbers.length, 300);
});

test("200 random documents are written and keyed as Python writes and keys them", () => {
  const wrong = vectors.documents.filter(({ value, canonical }) => canonicalJson(value) !== canonical);
  assert.deepEqual(wrong.map((d) => d.canonical), []);
  for (const { value, key } of vectors.documents) assert.equal(toolCallKey("run", "tool", value), key);
  assert.equal(vectors.documents.length, 200);
});

test("all the vectors at once, as the browser test checks them", () => {
  const { wrong, checked } = mismatches(client, vectors);
  assert.deepEqual(wrong, []);
  const { make_key, tool_call_key, numbers, documents } = vectors;
  assert.equal(checked, make_key.length + 2 * tool_call_key.length + numbers.length + 2 * documents.length);
});

test("makeKey refuses parts Python would write differently", () => {
  assert.throws(() => makeKey(), TypeError);
  assert.throws(() => makeKey(1.5), TypeError); // Python: "1.5" from a float, but 1.0 is "1.0"
  assert.throws(() => makeKey(true), TypeError); // Python: "True"
  assert.throws(() => makeKey(null), TypeError); // Python: "None"
  assert.throws(() => makeKey(2 ** 60), /BigInt/); // already rounded: pass 2n ** 60n
  assert.equal(makeKey(2n ** 60n), "1152921504606846976");
  assert.throws(() => makeKey("\ud800"), /surrogate/); // Python cannot encode it to hash it
});

test("canonicalJson refuses what is not JSON", () => {
  assert.throws(() => canonicalJson(NaN), TypeError);
  assert.throws(() => canonicalJson({ a: Infinity }), TypeError);
  assert.throws(() => canonicalJson(undefined), TypeError);
  assert.throws(() => canonicalJson(new Date(0)), /plain objects/);
  assert.throws(() => canonicalJson({ "\udc00": 1 }), /surrogate/);
});

test("toolCallKey is scoped to its run and ignores the arguments' key order", () => {
  const a = toolCallKey("conv-1", "search", { q: "lyon", limit: 5 });
  assert.equal(a, toolCallKey("conv-1", "search", { limit: 5, q: "lyon" }));
  assert.notEqual(a, toolCallKey("conv-2", "search", { q: "lyon", limit: 5 }));
  assert.notEqual(a, toolCallKey("conv-1", "search", { q: "lyon", limit: 6 }));
  assert.ok(a.startsWith("conv-1:search:"));
});
