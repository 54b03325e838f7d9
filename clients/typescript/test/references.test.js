// reference(): the server's rules for a reference, checked in the step that refers
// (idemdash/core/references.py; tests/core/test_references.py checks the same cases there).
import { test } from "node:test";
import assert from "node:assert/strict";

import { MAX_REFERENCES, reference } from "../dist/index.js";

test("a reference the server takes is returned as it will be sent", () => {
  assert.deepEqual(reference("stripe.charge", "ch_1"), { kind: "stripe.charge", value: "ch_1" });
  assert.deepEqual(reference("order", 1042), { kind: "order", value: "1042" });
  assert.deepEqual(reference("sku", "Kaffee – 250 g"), { kind: "sku", value: "Kaffee – 250 g" });
  assert.equal(MAX_REFERENCES, 20);
});

test("kinds and values the server refuses throw before anything is sent", () => {
  for (const kind of ["", "Stripe.Charge", "stripe charge", "_x", "k".repeat(65)]) {
    assert.throws(() => reference(kind, "ch_1"), TypeError, kind);
  }
  for (const value of ["", " ch_1", "ch_1 ", "ch_\u202e1", "a\u200bb", "tab\there", "\u0000", "x".repeat(256), 1.5, null]) {
    assert.throws(() => reference("stripe.charge", value), TypeError, JSON.stringify(value));
  }
});
