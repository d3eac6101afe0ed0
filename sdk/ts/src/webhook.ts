/**
 * Verifies the webhooks paysched delivers (Standard Webhooks): each POST
 * carries webhook-id (the receiver's idempotency key), webhook-timestamp
 * and webhook-signature, one or more signatures of "{id}.{timestamp}.{body}":
 * v1 (HMAC-SHA256, a whsec_ secret) or v1a (ed25519, a whpk_ public key).
 */
import { createHmac, createPublicKey, timingSafeEqual, verify as edVerify, type KeyObject } from "node:crypto";

/** How far a delivery's timestamp may be from the receiver's clock, either way (ms). */
export const defaultToleranceMs = 5 * 60 * 1000;

/** Why a delivery did not verify. */
export class WebhookError extends Error {
  constructor(readonly kind: "missing" | "stale" | "signature", message: string) {
    super(message);
    this.name = "WebhookError";
  }
}

type Key = { hmac: Buffer } | { pub: KeyObject };

function parseKey(k: string): Key {
  if (k.startsWith("whsec_")) {
    const b = Buffer.from(k.slice(6), "base64");
    if (b.length === 0) throw new TypeError("webhook: a whsec_ secret must be base64 after its prefix");
    return { hmac: b };
  }
  if (k.startsWith("whpk_")) {
    const b = Buffer.from(k.slice(5), "base64");
    if (b.length !== 32) throw new TypeError("webhook: a whpk_ key must be base64 of a 32-byte ed25519 public key");
    return { pub: createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: b.toString("base64url") }, format: "jwk" }) };
  }
  throw new TypeError("webhook: a key starts with whsec_ or whpk_");
}

/** Reads a header from a Headers, a Node IncomingHttpHeaders or a plain record. */
function header(h: Headers | Record<string, string | string[] | undefined>, name: string): string {
  if (h instanceof Headers) return h.get(name) ?? "";
  const v = h[name] ?? h[name.toLowerCase()];
  return Array.isArray(v) ? (v[0] ?? "") : (v ?? "");
}

/** Checks deliveries against one or more keys (both secrets during a rotation). */
export class Verifier {
  private readonly keys: Key[];

  constructor(keys: string[], private readonly toleranceMs = defaultToleranceMs, private readonly now: () => number = Date.now) {
    if (keys.length === 0) throw new TypeError("webhook: no key");
    this.keys = keys.map(parseKey);
  }

  /** Verifies a delivery's headers and its body (exactly the bytes received); returns its webhook-id. */
  verify(headers: Headers | Record<string, string | string[] | undefined>, body: string | Uint8Array): string {
    const id = header(headers, "webhook-id");
    const ts = header(headers, "webhook-timestamp");
    const sigs = header(headers, "webhook-signature");
    if (!id || !/^\d+$/.test(ts) || !sigs) throw new WebhookError("missing", "webhook: missing or malformed headers");
    if (Math.abs(this.now() - Number(ts) * 1000) > this.toleranceMs) throw new WebhookError("stale", "webhook: timestamp outside the tolerance");
    const content = Buffer.concat([Buffer.from(`${id}.${ts}.`), typeof body === "string" ? Buffer.from(body) : Buffer.from(body)]);
    for (const s of sigs.split(" ")) {
      const comma = s.indexOf(",");
      if (comma < 0) continue;
      const version = s.slice(0, comma);
      const sig = Buffer.from(s.slice(comma + 1), "base64");
      for (const k of this.keys) {
        if (version === "v1" && "hmac" in k) {
          const mac = createHmac("sha256", k.hmac).update(content).digest();
          if (mac.length === sig.length && timingSafeEqual(mac, sig)) return id;
        } else if (version === "v1a" && "pub" in k) {
          if (edVerify(null, content, k.pub, sig)) return id;
        }
      }
    }
    throw new WebhookError("signature", "webhook: no signature matches");
  }
}
