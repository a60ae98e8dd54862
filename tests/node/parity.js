// Drives amqplib (Node.js, promise API) against a broker URL through the
// RabbitMQ-parity cases its users hit. Each case runs on its own connection and
// records what the client saw; one case failing does not stop the others.
// Prints one JSON line {case: result-or-{error}}; exits non-zero only on a
// harness failure. Bounded: every wait has a deadline, the whole run 40 s.
'use strict';
const amqp = require('amqplib');

const REPLY_TO = 'amq.rabbitmq.reply-to';
const tag = () => Math.random().toString(16).slice(2, 10);

// Resolve when pred() is true; reject after ms. Polls on the event loop (setImmediate),
// so deliveries keep being processed while waiting.
function waitFor(pred, ms, what) {
  const deadline = Date.now() + ms;
  return new Promise((resolve, reject) => {
    (function poll() {
      if (pred()) return resolve();
      if (Date.now() > deadline) return reject(new Error(`timed out waiting for ${what}`));
      setTimeout(poll, 5);
    })();
  });
}

function withDeadline(promise, ms, what) {
  let t;
  const timeout = new Promise((_, reject) => {
    t = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(t));
}

function errInfo(err) {
  return { error: String(err && err.message || err), code: err && err.code !== undefined ? err.code : null };
}

async function updateSecret(url) {
  const conn = await amqp.connect(url);
  try {
    let event = false;
    conn.connection.once('update-secret-ok', () => { event = true; });
    const value = await withDeadline(conn.updateSecret(Buffer.from('guest'), 'rotation'),
      5000, 'updateSecret');
    // the connection carries on after the rotation
    const ch = await conn.createChannel();
    const q = await ch.assertQueue('', { exclusive: true });
    ch.sendToQueue(q.queue, Buffer.from('after-rotation'));
    // same channel, so the broker handles the publish before this get
    const got = await ch.get(q.queue, { noAck: true });
    return { resolved: true, value: value === undefined ? null : value, event,
      body: got ? got.content.toString() : null };
  } finally {
    await conn.close();
  }
}

async function directReplyTo(url) {
  const serverConn = await amqp.connect(url);
  const clientConn = await amqp.connect(url);
  try {
    const server = await serverConn.createChannel();
    const q = `rpc-${tag()}`;
    await server.assertQueue(q, { autoDelete: true });
    const seenReplyTo = [];
    await server.consume(q, (msg) => {
      seenReplyTo.push(msg.properties.replyTo);
      server.sendToQueue(msg.properties.replyTo, Buffer.from(msg.content.toString().toUpperCase()),
        { correlationId: msg.properties.correlationId });
      server.ack(msg);
    });
    const client = await clientConn.createChannel();
    const replies = {};
    await client.consume(REPLY_TO, (msg) => {
      replies[msg.properties.correlationId] = msg.content.toString();
    }, { noAck: true });
    for (let i = 0; i < 3; i++) {
      client.sendToQueue(q, Buffer.from(`req${i}`), { replyTo: REPLY_TO, correlationId: String(i) });
    }
    await waitFor(() => Object.keys(replies).length === 3, 10000, '3 replies');
    return { replies, seenReplyTo };
  } finally {
    await clientConn.close();
    await serverConn.close();
  }
}

async function checkDefaultExchange(url) {
  const conn = await amqp.connect(url);
  try {
    const ch = await conn.createChannel();
    const channelErrors = [];
    ch.on('error', (e) => channelErrors.push(errInfo(e)));
    let closed = false;
    ch.on('close', () => { closed = true; });
    let outcome;
    try {
      await withDeadline(ch.checkExchange(''), 5000, "checkExchange('')");
      outcome = { resolved: true };
    } catch (e) {
      outcome = errInfo(e);
    }
    await waitFor(() => closed, 5000, 'channel close').catch(() => {});
    // the connection survives a channel-level refusal
    const ch2 = await conn.createChannel();
    const ok = await ch2.checkExchange('amq.direct');
    return { outcome, channelErrors, channelClosed: closed, connectionUsable: !!ok };
  } finally {
    await conn.close();
  }
}

async function unbindAfterExchangeGone(url) {
  const conn = await amqp.connect(url);
  try {
    const ch = await conn.createChannel();
    const errors = [];
    ch.on('error', (e) => errors.push(errInfo(e)));
    const ex = `gone-${tag()}`;
    const q = (await ch.assertQueue('', { exclusive: true })).queue;
    await ch.assertExchange(ex, 'direct', { durable: false });
    await ch.bindQueue(q, ex, 'k');
    await ch.deleteExchange(ex);
    const ok = await withDeadline(ch.unbindQueue(q, ex, 'k'), 5000, 'unbindQueue');
    // the same channel still answers
    const after = await ch.checkQueue(q);
    return { resolved: true, ok: ok !== undefined, queueAfter: after.queue === q, errors };
  } finally {
    await conn.close();
  }
}

async function burstThenClose(url) {
  const conn = await amqp.connect(url);
  const connErrors = [];
  conn.on('error', (e) => connErrors.push(errInfo(e)));
  let closeEvent = false;
  conn.on('close', (e) => { closeEvent = true; if (e) connErrors.push(errInfo(e)); });
  // first: the broker does return mandatory messages to nowhere (before the acks)
  const cch = await conn.createConfirmChannel();
  let confirmedReturns = 0;
  cch.on('return', () => { confirmedReturns++; });
  const nowhere = `nowhere-${tag()}`;
  for (let i = 0; i < 5; i++) cch.publish('', nowhere, Buffer.from(`r${i}`), { mandatory: true });
  await withDeadline(cch.waitForConfirms(), 5000, 'confirms');
  // then the burst, and close straight away without waiting for anything
  const ch = await conn.createChannel();
  const chErrors = [];
  ch.on('error', (e) => chErrors.push(errInfo(e)));
  let burstReturns = 0;
  ch.on('return', () => { burstReturns++; });
  const body = Buffer.alloc(64, 'x');
  for (let i = 0; i < 2000; i++) ch.publish('', nowhere, body, { mandatory: true });
  let closeResolved = false;
  let closeError = null;
  try {
    await withDeadline(conn.close(), 10000, 'connection.close');
    closeResolved = true;
  } catch (e) {
    closeError = errInfo(e);
  }
  await waitFor(() => closeEvent, 5000, 'close event').catch(() => {});
  return { confirmedReturns, closeResolved, closeError, closeEvent, connErrors, chErrors, burstReturns };
}

async function prefetchPriority(url) {
  const conn = await amqp.connect(url);
  try {
    const pub = await conn.createChannel();
    const q = (await pub.assertQueue(`prio-${tag()}`, { autoDelete: true })).queue;
    const lowCh = await conn.createChannel();
    const highCh = await conn.createChannel();
    await lowCh.prefetch(5);
    await highCh.prefetch(5);
    const low = [];
    const high = [];
    // neither consumer acks: the prefetch window decides who may take more.
    // The low-priority consumer subscribes first so subscription order cannot win.
    await lowCh.consume(q, (m) => low.push(m), { priority: 0 });
    await highCh.consume(q, (m) => high.push(m), { priority: 10 });
    for (let i = 0; i < 8; i++) pub.sendToQueue(q, Buffer.from(String(i)));
    await waitFor(() => low.length + high.length === 8, 10000, '8 deliveries');
    const phase1 = { high: high.map((m) => m.content.toString()), low: low.map((m) => m.content.toString()) };
    // 4 more: the low consumer has room for 2, the other 2 must stay ready
    for (let i = 8; i < 12; i++) pub.sendToQueue(q, Buffer.from(String(i)));
    await waitFor(() => low.length === 5, 10000, 'low consumer to fill its window');
    const ready = (await pub.checkQueue(q)).messageCount;
    const phase2 = { high: high.length, low: low.length, ready };
    // one ack frees one slot on the high consumer: the next message goes there
    highCh.ack(high[0]);
    await waitFor(() => high.length === 6, 10000, 'high consumer to get one more');
    const phase3 = { highLast: high[5].content.toString(), low: low.length };
    return { phase1, phase2, phase3 };
  } finally {
    await conn.close();
  }
}

const CASES = { updateSecret, directReplyTo, checkDefaultExchange, unbindAfterExchangeGone,
  burstThenClose, prefetchPriority };

async function main(url, only) {
  const timer = setTimeout(() => { console.error('timeout'); process.exit(3); }, 40000);
  const out = {};
  for (const [name, fn] of Object.entries(CASES)) {
    if (only && only !== name) continue;
    try {
      out[name] = await withDeadline(fn(url), 15000, name);
    } catch (e) {
      out[name] = errInfo(e);
    }
  }
  clearTimeout(timer);
  console.log(JSON.stringify(out));
}

main(process.argv[2], process.argv[3]).catch((err) => {
  console.error(err && err.stack || String(err));
  process.exit(1);
});
