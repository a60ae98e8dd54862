// amqplib's "cancelled consumer" test, as amqplib's own suite runs it: a consumer
// on a durable queue, the queue deleted on the same channel, and the channel
// closed as soon as the server's basic.cancel arrives. RabbitMQ sends
// queue.delete-ok before that basic.cancel; if the cancel came first, the
// channel would close with the delete still unanswered and deleteQueue fail.
'use strict';
const amqp = require('amqplib');

async function main(url, queue) {
  const timer = setTimeout(() => { console.error('timeout'); process.exit(2); }, 20000);
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  await ch.assertQueue(queue); // durable: its deletion waits for a commit
  await ch.purgeQueue(queue);
  let deleted = null;
  const cancelled = new Promise((resolve, reject) => {
    ch.consume(queue, (msg) => {
      if (msg === null) resolve();
      else reject(new Error('message not expected'));
    }).then(() => {
      deleted = ch.deleteQueue(queue);
      deleted.catch(reject);
    }).catch(reject);
  });
  await cancelled;
  await ch.close(); // at once, as amqplib's test does
  const ok = await deleted;
  await conn.close();
  clearTimeout(timer);
  console.log(JSON.stringify({ messageCount: ok.messageCount }));
}

main(process.argv[2], process.argv[3]).catch((err) => {
  console.error(err && err.stack || String(err));
  process.exit(1);
});
