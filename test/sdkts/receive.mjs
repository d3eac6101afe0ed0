// A webhook receiver built on the TypeScript SDK's verifier (sdk/ts,
// dist/webhook.js in the folder it runs from): each delivery is verified
// with SECRET; it answers 204 when it verifies, 401 otherwise, and
// appends one JSON line per delivery to LOG.
import http from "node:http";
import fs from "node:fs";
import { Verifier } from "./dist/webhook.js";

const verifier = new Verifier([process.env.SECRET]);
const log = fs.openSync(process.env.LOG, "a");

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    let id = "", error = "";
    try {
      id = verifier.verify(req.headers, body);
    } catch (e) {
      error = e.message;
    }
    fs.writeSync(log, JSON.stringify({ id, ok: error === "", error }) + "\n");
    res.writeHead(error === "" ? 204 : 401);
    res.end();
  });
});
server.listen(0, "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
