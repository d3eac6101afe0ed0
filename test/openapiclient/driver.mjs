// driver.mjs drives the payments API through the client that
// swagger-typescript-api generated from the served /openapi.json (gen/api.js;
// client_test.go generates it, then runs this with PAYSCHED_BASE,
// PAYSCHED_TOKEN and PAYSCHED_GEN set). Every call goes through the generated
// client: this file only checks what comes back. It exits 1 on the first
// mismatch, saying which.
import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";

const { Api, ContentType } = await import(pathToFileURL(process.env.PAYSCHED_GEN).href);
const baseUrl = process.env.PAYSCHED_BASE;
const token = process.env.PAYSCHED_TOKEN;

// securityWorker is how the generated client applies the document's
// BearerJWT scheme to every operation marked secure.
const api = new Api({
  baseUrl,
  securityWorker: (tok) => (tok ? { headers: { Authorization: `Bearer ${tok}` } } : {}),
});
api.setSecurityData(token);
const anonymous = new Api({ baseUrl });
const pay = api.v1;

let step = "";
function fail(msg, res) {
  const body = res ? JSON.stringify(res.data ?? res.error) : "";
  console.error(`FAIL ${step}: ${msg}${res ? ` (status ${res.status}, body ${body})` : ""}`);
  process.exit(1);
}
function expectStatus(res, want) {
  if (res.status !== want) fail(`status ${res.status}, want ${want}`, res);
}
// expectError checks an error answer: its status, and a google.rpc.Status
// body whose ErrorInfo carries the reason.
function expectError(res, status, reason) {
  expectStatus(res, status);
  const st = res.error;
  if (!st || typeof st.code !== "number" || typeof st.message !== "string") fail("not a google.rpc.Status", res);
  const info = (st.details || []).find((d) => d["@type"] === "type.googleapis.com/google.rpc.ErrorInfo");
  if (!info || info.reason !== reason) fail(`ErrorInfo reason ${info && info.reason}, want ${reason}`, res);
}
function ok(what) {
  console.log(`ok   ${step}${what ? ": " + what : ""}`);
}

const due = new Date(Date.now() + 3600_000).toISOString();
const create = (body, key, params = {}) =>
  pay.createScheduledPayment(body, {
    ...params,
    headers: { "Idempotency-Key": key, ...(params.headers || {}) },
  });

step = "create";
const key = randomUUID();
const first = { payee: "bob", amount: 500, currency: "EUR", dueAt: due, metadata: { order: "42" } };
let r = await create(first, key);
expectStatus(r, 201);
const p = r.data;
if (typeof p.amount !== "number" || p.amount !== 500) fail(`amount ${JSON.stringify(p.amount)}, want the number 500`, r);
if (p.status !== "PENDING" || !p.paymentId) fail("not a PENDING payment with an id", r);
if (r.headers.get("Idempotent-Replayed") !== null) fail("Idempotent-Replayed on a first create", r);
ok(p.paymentId);

step = "replay";
r = await create(first, key);
expectStatus(r, 201);
if (r.headers.get("Idempotent-Replayed") !== "true") fail(`Idempotent-Replayed ${r.headers.get("Idempotent-Replayed")}`, r);
if (r.data.paymentId !== p.paymentId) fail("a replay made another payment", r);
ok("Idempotent-Replayed: true");

step = "get";
r = await pay.getScheduledPayment(p.paymentId);
expectStatus(r, 200);
if (r.data.paymentId !== p.paymentId || !Array.isArray(r.data.attempts)) fail("not the payment with its attempts", r);
ok();

step = "list with paging";
const ids = new Set([p.paymentId]);
for (const payee of ["carol", "dave"]) {
  r = await create({ ...first, payee }, randomUUID());
  expectStatus(r, 201);
  ids.add(r.data.paymentId);
}
const seen = [];
let cursor;
let pages = 0;
do {
  r = await pay.listScheduledPayments({ pageSize: 2, ...(cursor ? { cursor } : {}) });
  expectStatus(r, 200);
  if (!Array.isArray(r.data.payments) || r.data.payments.length > 2) fail("a page is not at most pageSize payments", r);
  seen.push(...r.data.payments.map((x) => x.paymentId));
  cursor = r.data.nextCursor;
  pages++;
} while (cursor && pages < 10);
if (pages !== 2 || seen.length !== 3 || !seen.every((id) => ids.has(id)) || new Set(seen).size !== 3) {
  fail(`${pages} pages with ${JSON.stringify(seen)}, want the 3 payments on 2 pages`);
}
ok(`${seen.length} payments on ${pages} pages`);

step = "cancel";
r = await pay.cancelScheduledPayment(p.paymentId);
expectStatus(r, 200);
if (r.data.status !== "CANCELLED") fail(`status ${r.data.status}`, r);
ok();

step = "batchCreate";
// swagger-typescript-api reads the ":batchCreate" of the path as a path
// parameter (a generator quirk with AIP-136 custom methods): its value is
// the literal suffix.
r = await pay.batchCreateScheduledPayments(":batchCreate", {
  items: [
    { ...first, requestId: randomUUID() },
    { ...first, amount: 0, requestId: randomUUID() },
  ],
});
expectStatus(r, 200);
const [good, bad] = r.data.results || [];
if (!good || good.outcome !== "OUTCOME_CREATED" || typeof good.payment?.amount !== "number") fail("item 0 not created", r);
if (!bad || bad.outcome !== "OUTCOME_REJECTED" || bad.reason !== "VALIDATION_FAILED" || "payment" in bad) {
  fail("item 1 not rejected without a payment", r);
}
ok();

step = "400 validation";
r = await create({ ...first, amount: 0 }, randomUUID());
expectError(r, 400, "VALIDATION_FAILED");
const br = r.error.details.find((d) => d["@type"] === "type.googleapis.com/google.rpc.BadRequest");
if (!br || !br.fieldViolations.some((v) => v.field === "amount")) fail("no BadRequest naming amount", r);
ok();

step = "401 no token";
r = await anonymous.v1.listScheduledPayments({});
expectError(r, 401, "UNAUTHENTICATED");
ok();

step = "404 unknown id";
r = await pay.getScheduledPayment(randomUUID());
expectError(r, 404, "NOT_FOUND");
ok();

step = "409 key reused with another body";
r = await create({ ...first, amount: 501 }, key);
expectError(r, 409, "IDEMPOTENCY_KEY_REUSED");
ok();

step = "415 wrong content type";
r = await create(first, randomUUID(), { type: ContentType.Text });
expectError(r, 415, "UNSUPPORTED_MEDIA_TYPE");
ok();

step = "413 body too large";
r = await create({ ...first, description: "x".repeat(70 << 10) }, randomUUID());
expectError(r, 413, "BODY_TOO_LARGE");
ok();

console.log("PASS");
