// Every operation of the public document has its method here
// (sdk/operations.json, which test/contract holds to the document).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Paysched } from "../index.js";

test("the SDK covers every public operation", () => {
  // sdk/operations.json, beside this package (test/sdkts names it when
  // the package runs from a copy).
  const path = process.env["PAYSCHED_OPERATIONS"] ?? new URL("../../../operations.json", import.meta.url);
  const ops = JSON.parse(readFileSync(path, "utf8")) as Record<string, { ts?: string } | string>;
  const proto = Paysched.prototype as unknown as Record<string, unknown>;
  let n = 0;
  for (const [id, m] of Object.entries(ops)) {
    if (id === "//" || typeof m === "string") continue;
    n++;
    assert.equal(typeof proto[m.ts ?? ""], "function", `operation ${id}: no method ${m.ts}`);
  }
  assert.ok(n >= 20, `${n} operations`);
});
