// Drives amqplib (Node.js) against a broker URL: confirms, prefetch, topic
// routing, nack/requeue. Prints one JSON line with what it saw; exits non-zero
// on any error. Bounded: the whole run must finish within 20 s.
'use strict';
const amqp = require('amqplib');

async function main(url) {
  const timer = setTimeout(() => { console.error('timeout'); process.exit(3); }, 20000);
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  const tag = Math.random().toString(16).slice(2, 10);
  const q = `node-${tag}`;
  const ex = `node-topic-${tag}`;
  await ch.assertExchange(ex, 'topic', { durable: false, autoDelete: false });
  await ch.assertQueue(q, { durable: true });
  await ch.bindQueue(q, ex, 'orders.#');
  for (let i = 0; i < 20; i++) {
    ch.publish(ex, `orders.eu.${i}`, Buffer.from(String(i)), { persistent: true, messageId: `m${i}` });
  }
  await ch.waitForConfirms();
  ch.publish(ex, 'other', Buffer.from('unrouted'));
  await ch.waitForConfirms();
  await ch.prefetch(5);
  const got = [];
  let requeued = false;
  let redelivered = false;
  await new Promise((resolve, reject) => {
    ch.consume(q, (msg) => {
      if (!msg) { reject(new Error('consumer cancelled')); return; }
      if (!requeued) { requeued = true; ch.nack(msg, false, true); return; }
      if (msg.fields.redelivered) redelivered = true;
      got.push(Number(msg.content.toString()));
      ch.ack(msg);
      if (got.length === 20) resolve();
    }, { noAck: false }).catch(reject);
  });
  await ch.deleteQueue(q);
  await ch.deleteExchange(ex);
  await ch.close();
  await conn.close();
  clearTimeout(timer);
  console.log(JSON.stringify({ count: got.length, sorted: got.slice().sort((a, b) => a - b), redelivered }));
}

main(process.argv[2]).catch((err) => { console.error(err && err.stack || String(err)); process.exit(1); });
