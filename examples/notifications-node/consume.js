// A paysched notification consumer in Node: each message on
// paysched.notifications is a CloudEvent in Kafka binary mode (ce_* headers,
// a JSON body). paysched's topics are snappy-compressed, which kafkajs only
// reads with a codec plugin, registered here.
'use strict';

const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs');
const SnappyCodec = require('kafkajs-snappy');
const { Kafka: CEKafka } = require('cloudevents');

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;

const brokers = (process.env.PAYSCHED_KAFKA_BROKERS || '127.0.0.1:9092').split(',');
const topic = process.env.PAYSCHED_NOTIFICATIONS_TOPIC || 'paysched.notifications';
const group = process.env.GROUP || 'notifications-example';
const fromBeginning = process.env.FROM_BEGINNING === '1';

// Redeliveries carry the same ce_id: drop what was already handled. A real
// consumer keeps these ids in its own store, next to what it does with them.
const seen = new Set();

async function main() {
  const kafka = new Kafka({ clientId: 'paysched-example', brokers, logLevel: logLevel.WARN });
  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning });
  process.on('SIGINT', () => consumer.disconnect().then(() => process.exit(0)));
  await consumer.run({
    eachMessage: async ({ message }) => {
      const headers = {};
      for (const [k, v] of Object.entries(message.headers || {})) headers[k] = v && v.toString();
      // The CloudEvents SDK reads binary-mode Kafka messages as they are.
      const event = CEKafka.toEvent({ key: message.key && message.key.toString(), value: message.value, headers });
      if (seen.has(event.id)) return;
      seen.add(event.id);
      const data = typeof event.data === 'string' ? JSON.parse(event.data) : event.data;
      console.log(`${event.time}  ${event.type.padEnd(32)} ${event.subject}  ${data.amount} ${data.currency} -> ${data.payee}`);
    },
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
