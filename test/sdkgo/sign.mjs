// Signs a body with the npm standardwebhooks package, as another sender
// would: prints {id, timestamp, signature} as JSON.
// node sign.mjs SECRET ID UNIX_SECONDS BODY
import { Webhook } from "standardwebhooks";

const [secret, id, ts, body] = process.argv.slice(2);
const wh = new Webhook(secret);
const signature = wh.sign(id, new Date(Number(ts) * 1000), body);
console.log(JSON.stringify({ id, timestamp: ts, signature }));
