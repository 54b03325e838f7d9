// The shared key vectors (clients/test-vectors/keys.json), read the same way by the Node
// suites and by the browser test (tests/clients/test_typescript.py): no Node APIs here.

/** JSON.parse, but an integer literal beyond 2**53 - 1 becomes a BigInt, as it stays exact
 * in Python: its tokens are rewritten to a marker object before parsing. */
export function parseWithBigInts(text) {
  const marked = text.replace(/"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g, (token) =>
    /^-?\d+$/.test(token) && !Number.isSafeInteger(Number(token)) ? `{"$bigint":"${token}"}` : token,
  );
  return JSON.parse(marked, (_, value) =>
    value && typeof value === "object" && !Array.isArray(value) && "$bigint" in value ? BigInt(value.$bigint) : value,
  );
}

/** Every vector the client's makeKey, toolCallKey and canonicalJson answer otherwise, and how many were checked. */
export function mismatches({ makeKey, toolCallKey, canonicalJson }, vectors) {
  const wrong = [];
  let checked = 0;
  const expect = (what, actual, expected) => {
    checked++;
    if (actual !== expected) wrong.push({ what, actual, expected });
  };
  for (const { parts, key } of vectors.make_key) expect(`makeKey #${checked}`, makeKey(...parts), key);
  for (const { run_id, tool_name, arguments: args, canonical, key } of vectors.tool_call_key) {
    expect(`canonicalJson of ${tool_name}`, canonicalJson(args), canonical);
    expect(`toolCallKey ${tool_name}`, toolCallKey(run_id, tool_name, args), key);
  }
  for (const { value, canonical } of vectors.numbers) expect(`number ${value}`, canonicalJson(value), canonical);
  for (const { value, canonical, key } of vectors.documents) {
    expect("document", canonicalJson(value), canonical);
    expect("document key", toolCallKey("run", "tool", value), key);
  }
  return { wrong, checked };
}
