// Every problem type docs/http-contract.md documents maps to its own typed error class.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import * as client from "../dist/index.js";

const { ApiError, PROBLEM_ERRORS, PROBLEM_PREFIX, problemError } = client;

function documentedSlugs() {
  const page = readFileSync(new URL("../../../docs/http-contract.md", import.meta.url), "utf8");
  const table = page.slice(page.indexOf("## Problem types"), page.indexOf("## Requests the server refuses"));
  return [...table.matchAll(/^\| `urn:idemdash:problem:([a-z-]+)` \|/gm)].map((m) => m[1]);
}

test("the problem types table is read", () => {
  assert.ok(documentedSlugs().length >= 30);
});

test("every documented problem type, and only those, has its error class", () => {
  assert.deepEqual(Object.keys(PROBLEM_ERRORS).sort(), documentedSlugs().sort());
});

for (const slug of documentedSlugs()) {
  test(`${slug} is thrown as its own class, an ApiError, exported by the package`, () => {
    const error = problemError(400, { type: PROBLEM_PREFIX + slug, title: "T", detail: "D" }, 3);
    const ErrorClass = PROBLEM_ERRORS[slug];
    assert.ok(error instanceof ErrorClass && error instanceof ApiError && error instanceof Error);
    assert.equal(client[ErrorClass.name], ErrorClass); // exported under its name
    assert.equal(error.name, ErrorClass.name);
    assert.equal(error.type, PROBLEM_PREFIX + slug);
    assert.equal(error.retryAfter, 3);
    assert.equal(error.message, "400 T: D");
  });
}

test("each class belongs to one problem type", () => {
  const classes = Object.values(PROBLEM_ERRORS);
  assert.equal(new Set(classes).size, classes.length);
});

test("an unknown type, or a body that is no problem, is a plain ApiError", () => {
  for (const problem of [{ type: "about:blank" }, { type: PROBLEM_PREFIX + "toString" }, {}]) {
    const error = problemError(502, problem);
    assert.equal(error.constructor, ApiError);
    assert.equal(error.status, 502);
  }
});
