// Reads PAYSCHED_COUNT CloudEvents from PAYSCHED_TOPIC with kafkajs, first
// without a snappy codec (kafkajs has none built in: it must fail, which is
// why the README tells consumers), then with kafkajs-snappy (it must read
// every event and the CloudEvents SDK must accept each). Exits non-zero on
// any mismatch.
import kafkajs from 'kafkajs';
import SnappyCodec from 'kafkajs-snappy';
import { Kafka as CEKafka } from 'cloudevents';

const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = kafkajs;
const brokers = process.env.PAYSCHED_BROKERS.split(',');
const topic = process.env.PAYSCHED_TOPIC;
const want = Number(process.env.PAYSCHED_COUNT);

async function read(group, timeoutMs) {
  const kafka = new Kafka({ clientId: 'paysched-test', brokers, logLevel: logLevel.NOTHING, retry: { retries: 0 } });
  const consumer = kafka.consumer({ groupId: group, retry: { retries: 0 } });
  const events = [];
  let failure = null;
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  consumer.on(consumer.events.CRASH, (e) => { failure = e.payload.error; });
  await consumer.run({
    eachMessage: async ({ message }) => {
      const headers = {};
      for (const [k, v] of Object.entries(message.headers || {})) headers[k] = v && v.toString();
      events.push(CEKafka.toEvent({ key: message.key && message.key.toString(), value: message.value, headers }));
    },
  });
  const deadline = Date.now() + timeoutMs;
  while (events.length < want && !failure && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  await consumer.disconnect().catch(() => {});
  return { events, failure };
}

const plain = await read('no-codec', 5000);
if (plain.events.length > 0 || !plain.failure || !/snappy/i.test(String(plain.failure))) {
  console.error(`without a codec: read ${plain.events.length}, error ${plain.failure}: want a snappy error and nothing read`);
  process.exit(1);
}
console.log(`without a snappy codec kafkajs fails: ${plain.failure.message || plain.failure}`);

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;
const got = await read('with-codec', 20000);
if (got.failure || got.events.length !== want) {
  console.error(`with kafkajs-snappy: read ${got.events.length} of ${want}, error ${got.failure}`);
  process.exit(1);
}
for (const e of got.events) {
  if (e.specversion !== '1.0' || !e.id || !e.type.startsWith('paysched.payment.') || e.source !== '/paysched/payments') {
    console.error(`not a paysched CloudEvent: ${JSON.stringify(e)}`);
    process.exit(1);
  }
}
console.log(`with kafkajs-snappy: ${got.events.length} CloudEvents read and validated`);
process.exit(0);
