// The core against stand-in servers: retries, pages, errors, batches,
// webhook verification.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createHmac, generateKeyPairSync, sign as edSign } from "node:crypto";
import type { AddressInfo } from "node:net";
import { Paysched, PayschedError, Reasons, isReason } from "../index.js";
import { Verifier, WebhookError } from "../webhook.js";

type Handler = (n: number, req: IncomingMessage, body: string, res: ServerResponse) => void;

async function fake(handle: Handler) {
  const seen: { req: IncomingMessage; body: string }[] = [];
  const srv = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      seen.push({ req, body });
      handle(seen.length, req, body, res);
    });
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  return { url, seen, close: () => new Promise<void>((r) => srv.close(() => r())) };
}

function rpcError(res: ServerResponse, status: number, reason: string, extra: object[] = []) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ code: 3, message: "no", details: [
    { "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason, domain: "paysched", metadata: { k: "v" } }, ...extra] }));
}

const payment = { paymentId: "p1", status: "PENDING", amount: 1250, currency: "EUR" };

function client(url: string, waits: number[] = []) {
  return new Paysched(url, { token: "tok", sleep: async (ms) => { waits.push(ms); } });
}

test("a retry sends the same idempotency key and honours Retry-After", async () => {
  const f = await fake((n, _req, _body, res) => {
    if (n === 1) { res.setHeader("retry-after", "2"); return rpcError(res, 503, "UNAVAILABLE"); }
    if (n === 2) { res.setHeader("retry-after", "1"); return rpcError(res, 429, "RATE_LIMITED"); }
    res.writeHead(201, { "content-type": "application/json", "idempotent-replayed": "true" });
    res.end(JSON.stringify(payment));
  });
  try {
    const waits: number[] = [];
    const got = await client(f.url, waits).createPayment({ amount: 1250 });
    assert.equal(f.seen.length, 3);
    const key = f.seen[0]!.req.headers["idempotency-key"];
    assert.ok(key);
    for (const s of f.seen) {
      assert.equal(s.req.headers["idempotency-key"], key);
      assert.equal(s.body, f.seen[0]!.body);
      assert.equal(s.req.headers["authorization"], "Bearer tok");
    }
    assert.ok(waits[0]! >= 2000 && waits[1]! >= 1000, `waits ${waits}`);
    assert.equal(got.replayed, true);
    assert.equal(got.idempotencyKey, key);
    assert.equal(got.value.paymentId, "p1");
  } finally { await f.close(); }
});

test("retries are bounded, and a Retry-After past the bound is not waited for", async () => {
  for (const [after, attempts] of [[undefined, 4], ["3600", 1]] as const) {
    const f = await fake((_n, _req, _body, res) => {
      if (after) res.setHeader("retry-after", after);
      rpcError(res, 503, "UNAVAILABLE");
    });
    try {
      await assert.rejects(client(f.url).getPayment("p1"), (e: unknown) => isReason(e, Reasons.Unavailable));
      assert.equal(f.seen.length, attempts);
    } finally { await f.close(); }
  }
});

test("a POST without a key is sent once", async () => {
  const f = await fake((_n, _req, _body, res) => rpcError(res, 503, "UNAVAILABLE"));
  try {
    const c = client(f.url);
    const { response } = await c.api.POST("/v1/schedules/{scheduleId}:pause", { params: { path: { scheduleId: "s1" } }, body: {} });
    assert.equal(response.status, 503);
    assert.equal(f.seen.length, 1);
  } finally { await f.close(); }
});

test("pages are iterated", async () => {
  const pages: Record<string, object> = {
    "": { payments: [{ paymentId: "a" }, { paymentId: "b" }], nextCursor: "c2" },
    c2: { payments: [{ paymentId: "c" }], nextCursor: "c3" },
    c3: { payments: [{ paymentId: "d" }], nextCursor: "" },
  };
  const f = await fake((_n, req, _body, res) => {
    const q = new URL(req.url ?? "", "http://x").searchParams;
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(pages[q.get("cursor") ?? ""]));
  });
  try {
    const ids: string[] = [];
    for await (const p of client(f.url).payments({ status: "PENDING", pageSize: 2 })) ids.push(p.paymentId ?? "");
    assert.deepEqual(ids, ["a", "b", "c", "d"]);
    assert.equal(f.seen.length, 3);
    assert.equal(new URL(f.seen[0]!.req.url ?? "", "http://x").searchParams.get("status"), "PENDING");
    for await (const _ of client(f.url).payments()) break;
    assert.equal(f.seen.length, 4, "an early stop fetches no further page");
  } finally { await f.close(); }
});

test("errors are typed by reason", async () => {
  for (const [status, reason] of [[409, Reasons.IdempotencyKeyReused], [409, Reasons.AlreadyProcessing], [404, Reasons.NotFound],
    [400, Reasons.Validation], [400, Reasons.ScheduleState]] as const) {
    const f = await fake((_n, _req, _body, res) => rpcError(res, status, reason,
      [{ "@type": "type.googleapis.com/google.rpc.BadRequest", fieldViolations: [{ field: "amount", description: "must be positive" }] }]));
    try {
      await assert.rejects(client(f.url).cancelPayment("p1"), (e: unknown) => {
        assert.ok(e instanceof PayschedError);
        assert.equal(e.status, status);
        assert.equal(e.reason, reason);
        assert.ok(e.is(reason));
        assert.equal(e.metadata["k"], "v");
        assert.deepEqual(e.violations, [{ field: "amount", description: "must be positive" }]);
        return true;
      });
    } finally { await f.close(); }
  }
});

test("a batch is split at the limit and each item keyed", async () => {
  const f = await fake((_n, _req, body, res) => {
    const items = (JSON.parse(body) as { items: { requestId?: string }[] }).items;
    if (items.some((i) => !i.requestId)) return rpcError(res, 400, "IDEMPOTENCY_KEY_REQUIRED");
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ results: items.map((it, index) => ({ index, outcome: "OUTCOME_CREATED", payment: { paymentId: it.requestId } })) }));
  });
  try {
    const items = Array.from({ length: 2500 }, () => ({ amount: 1 } as { amount: number; requestId?: string }));
    items[7]!.requestId = "mine";
    const res = await client(f.url).createPayments(items);
    assert.equal(f.seen.length, 3);
    assert.equal(res.length, 2500);
    const keys = new Set(res.map((r) => r.payment?.paymentId));
    assert.equal(keys.size, 2500);
    res.forEach((r, i) => assert.equal(r.index, i));
    assert.equal(res[7]!.payment?.paymentId, "mine");
    assert.equal(items[0]!.requestId, res[0]!.payment?.paymentId, "the keys are left in the caller's items");
    const again = await client(f.url).createPayments(items);
    assert.equal(again[2499]!.payment?.paymentId, res[2499]!.payment?.paymentId, "a second call sends the same keys");
    assert.ok(f.seen.every((s) => !("x-paysched-retry-safe" in s.req.headers)), "the SDK's marker went on the wire");
  } finally { await f.close(); }
});

test("webhooks verify: v1, v1a, a rotation; stale, altered and wrong ones do not", () => {
  const now = 1_800_000_000_000;
  const oldSecret = "whsec_" + Buffer.from("the-old-secret-of-24-bytes!").toString("base64");
  const newSecret = "whsec_" + Buffer.from("the-new-secret-of-24-bytes!").toString("base64");
  const v1 = (secret: string, id: string, ts: number, body: string) =>
    "v1," + createHmac("sha256", Buffer.from(secret.slice(6), "base64")).update(`${id}.${ts}.${body}`).digest("base64");
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const whpk = "whpk_" + Buffer.from(publicKey.export({ format: "jwk" }).x ?? "", "base64url").toString("base64");
  const body = '{"type":"paysched.payment.completed","data":{"paymentId":"p1"}}';
  const ts = now / 1000;
  const h = (id: string, t: number, sig: string) => ({ "webhook-id": id, "webhook-timestamp": String(t), "webhook-signature": sig });
  const ed = "v1a," + edSign(null, Buffer.from(`m1.${ts}.${body}`), privateKey).toString("base64");
  const cases: [string, string[], Record<string, string>, string, string | null][] = [
    ["v1", [newSecret], h("m1", ts, v1(newSecret, "m1", ts, body)), body, null],
    ["v1a", [whpk], h("m1", ts, ed), body, null],
    ["signed with both in a rotation", [newSecret], h("m1", ts, v1(oldSecret, "m1", ts, body) + " " + v1(newSecret, "m1", ts, body)), body, null],
    ["the receiver holds both", [newSecret, oldSecret], h("m1", ts, v1(oldSecret, "m1", ts, body)), body, null],
    ["a wrong secret", [oldSecret], h("m1", ts, v1(newSecret, "m1", ts, body)), body, "signature"],
    ["an altered body", [newSecret], h("m1", ts, v1(newSecret, "m1", ts, body)), body + " ", "signature"],
    ["stale", [newSecret], h("m1", ts - 360, v1(newSecret, "m1", ts - 360, body)), body, "stale"],
    ["from the future", [newSecret], h("m1", ts + 360, v1(newSecret, "m1", ts + 360, body)), body, "stale"],
    ["no signature", [newSecret], h("m1", ts, ""), body, "missing"],
  ];
  for (const [name, keys, headers, b, want] of cases) {
    const v = new Verifier(keys, undefined, () => now);
    if (want === null) {
      assert.equal(v.verify(new Headers(headers), b), "m1", name);
    } else {
      assert.throws(() => v.verify(headers, b), (e: unknown) => e instanceof WebhookError && e.kind === want, name);
    }
  }
  assert.throws(() => new Verifier(["secret"]), TypeError);
});
