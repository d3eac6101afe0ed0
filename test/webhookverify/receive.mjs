// A webhook receiver that trusts nothing of ours: every delivery must be
// verified by both the standardwebhooks and the svix npm packages, with
// every secret in SECRETS (comma separated: during a rotation the old and
// the new secret must each verify). It answers 204 when they all verify,
// 400 otherwise, and appends one JSON line per delivery to LOG.
import http from "node:http";
import fs from "node:fs";
import { Webhook as Standard } from "standardwebhooks";
import { Webhook as Svix } from "svix";

const secrets = process.env.SECRETS.split(",");
const log = fs.openSync(process.env.LOG, "a");

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const h = {
      "webhook-id": req.headers["webhook-id"],
      "webhook-timestamp": req.headers["webhook-timestamp"],
      "webhook-signature": req.headers["webhook-signature"],
    };
    // svix reads its own header names; the values are the spec's.
    const sv = { "svix-id": h["webhook-id"], "svix-timestamp": h["webhook-timestamp"], "svix-signature": h["webhook-signature"] };
    const failures = [];
    for (const s of secrets) {
      try { new Standard(s.replace(/^whsec_/, "")).verify(body, h); } catch (e) { failures.push(`standardwebhooks: ${e.message}`); }
      try { new Svix(s).verify(body, sv); } catch (e) { failures.push(`svix: ${e.message}`); }
    }
    fs.writeSync(log, JSON.stringify({ id: h["webhook-id"], ok: failures.length === 0, failures }) + "\n");
    res.writeHead(failures.length === 0 ? 204 : 400);
    res.end();
  });
});
server.listen(0, "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
