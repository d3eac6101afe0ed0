// The SDK against a real payments-api (test/sdkts starts one and sets
// PAYSCHED_BASE and the tokens); skipped when it is not set.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, request } from "node:http";
import type { AddressInfo } from "node:net";
import { Paysched, Reasons, isReason, newKey, type NewPayment } from "../index.js";
import { Verifier } from "../webhook.js";

const base = process.env["PAYSCHED_BASE"];
const skip = base ? false : "PAYSCHED_BASE is not set (test/sdkts sets it)";
const fast = { attempts: 4, baseMs: 10, maxMs: 100, maxRetryAfterMs: 1000 };

const due = () => new Date(Date.now() + 24 * 3600 * 1000).toISOString();
const newPayment = (amount: number): NewPayment => ({ payee: "landlord", amount, currency: "EUR", dueAt: due() });

test("create, get, pages, cancel, a batch, a replay and a reuse", { skip }, async () => {
  const c = new Paysched(base!, { token: process.env["PAYSCHED_TOKEN"], retry: fast });
  const ids: string[] = [];
  for (let i = 0; i < 5; i++) {
    const p = await c.createPayment(newPayment(100 + i));
    assert.equal(p.replayed, false);
    assert.equal(p.value.status, "PENDING");
    ids.push(p.value.paymentId!);
  }
  assert.equal((await c.getPayment(ids[0]!)).amount, 100);
  const listed: string[] = [];
  for await (const p of c.payments({ pageSize: 2 })) listed.push(p.paymentId!);
  assert.deepEqual(listed, [...ids].reverse());
  assert.equal((await c.cancelPayment(ids[1]!)).status, "CANCELLED");
  await assert.rejects(c.getPayment("0197a000-0000-7000-8000-00000000dead"), (e: unknown) => isReason(e, Reasons.NotFound));

  const key = newKey();
  const first = await c.createPayment(newPayment(777), { idempotencyKey: key });
  const again = await c.createPayment({ payee: first.value.payee!, amount: 777, currency: "EUR", dueAt: first.value.dueAt! }, { idempotencyKey: key });
  assert.equal(again.replayed, true);
  assert.equal(again.value.paymentId, first.value.paymentId);
  await assert.rejects(c.createPayment(newPayment(778), { idempotencyKey: key }), (e: unknown) => isReason(e, Reasons.IdempotencyKeyReused));

  const items = Array.from({ length: 1005 }, (_, i) => newPayment(1 + i));
  const res = await c.createPayments(items);
  assert.equal(res.length, 1005);
  res.forEach((r, i) => { assert.equal(r.index, i); assert.equal(r.outcome, "OUTCOME_CREATED"); });
});

test("an answer lost to a 503 is retried into one payment", { skip }, async () => {
  const target = new URL(base!);
  let posts = 0;
  // A proxy that forwards the first create and answers the client 503.
  const proxy = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      const lose = req.method === "POST" && ++posts === 1;
      const up = request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (ur) => {
        let out = "";
        ur.on("data", (c: Buffer) => (out += c.toString()));
        ur.on("end", () => {
          if (lose) {
            res.writeHead(503, { "retry-after": "0", "content-type": "application/json" });
            res.end('{"code":14,"message":"upstream lost"}');
            return;
          }
          res.writeHead(ur.statusCode ?? 502, ur.headers);
          res.end(out);
        });
      });
      up.end(body);
    });
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  try {
    const c = new Paysched(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, { token: process.env["PAYSCHED_TOKEN_LOST"], retry: fast });
    const p = await c.createPayment(newPayment(4200));
    assert.equal(p.replayed, true);
    assert.equal(posts, 2);
    let n = 0;
    for await (const _ of c.payments()) n++;
    assert.equal(n, 1);
  } finally {
    await new Promise<void>((r) => proxy.close(() => r()));
  }
});

test("schedules and the tenant's endpoints", { skip }, async () => {
  const c = new Paysched(base!, { token: process.env["PAYSCHED_TOKEN_TENANT"], retry: fast });
  const start = new Date(Date.now() + 2 * 86400_000).toISOString().slice(0, 10) + "T09:00:00";
  const s = await c.createSchedule({ payee: "landlord", amount: 120000, currency: "EUR", rrule: "FREQ=MONTHLY", start, timeZone: "Europe/London" });
  const id = s.value.scheduleId!;
  assert.equal((await c.getSchedule(id)).schedule?.scheduleId, id);
  assert.equal((await c.previewSchedule({ scheduleId: id, count: 3 })).length, 3);
  const updated = await c.updateSchedule(id, { payee: "landlord", amount: 125000, currency: "EUR", rrule: "FREQ=MONTHLY", start, timeZone: "Europe/London" });
  assert.equal(updated.schedule?.amount, 125000);
  await c.pauseSchedule(id);
  await assert.rejects(c.pauseSchedule(id), (e: unknown) => isReason(e, Reasons.ScheduleState));
  await c.resumeSchedule(id);
  assert.equal((await c.cancelSchedule(id)).schedule?.state, "SCHEDULE_STATE_CANCELLED");
  let n = 0;
  for await (const _ of c.schedules(1)) n++;
  assert.equal(n, 1);

  const ep = await c.createEndpoint({ url: "http://127.0.0.1:9/hook", description: "ts sdk" });
  assert.ok(ep.secret?.startsWith("whsec_"));
  assert.equal((await c.endpoints()).length, 1);
  const rotated = await c.rotateEndpointSecret(ep.endpoint!.endpointId!, 3600);
  assert.notEqual(rotated, ep.secret);
  await c.setEndpointEnabled(ep.endpoint!.endpointId!, false);
  assert.deepEqual(await c.webhookAttempts({ endpointId: ep.endpoint!.endpointId! }), []);
  assert.equal(await c.recoverMessages(ep.endpoint!.endpointId!, new Date(Date.now() - 3600_000)), 0);
  await assert.rejects(c.resendMessage(ep.endpoint!.endpointId!, "no-such-message"), (e: unknown) => isReason(e, Reasons.NotFound));
});

test("a delivery paysched signed verifies", { skip: process.env["PAYSCHED_SIGNED"] ? false : "PAYSCHED_SIGNED is not set" }, () => {
  const d = JSON.parse(process.env["PAYSCHED_SIGNED"]!) as { secrets: string[]; headers: Record<string, string>; body: string };
  for (const s of d.secrets) {
    // Signed with the old and the new secret (a rotation): either verifies.
    assert.equal(new Verifier([s]).verify(d.headers, d.body), d.headers["webhook-id"]);
  }
  assert.throws(() => new Verifier([d.secrets[0]!]).verify(d.headers, d.body + "x"));
});
