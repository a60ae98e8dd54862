// @stomp/stompjs against amqplite, over TCP (tcp://HOST:PORT, through a small
// WebSocket-shaped adapter around a net.Socket, the way stompjs's guide runs it
// in Node) or over WebSockets (ws://HOST:PORT/ws, with the `ws` package).
// Subscribes to QUEUE with client-individual acks, sends a message with a custom
// header and a receipt, acks what comes back, then sends a persistent message to
// QUEUE-out (receipted) and prints one JSON line: what it received.
// Usage: node stomp_client.js tcp://127.0.0.1:PORT|ws://127.0.0.1:PORT/ws QUEUE
"use strict";
const net = require("net");
const { Client } = require("@stomp/stompjs");

const [url, queue] = process.argv.slice(2);

/** A raw TCP connection with the part of the WebSocket interface stompjs uses. */
class TcpSocket {
  constructor(host, port) {
    this.readyState = 0; // CONNECTING
    this.binaryType = "arraybuffer";
    this.protocol = "";
    this.onopen = this.onmessage = this.onclose = this.onerror = null;
    this.sock = net.connect(port, host, () => {
      this.readyState = 1; // OPEN
      if (this.onopen) this.onopen({});
    });
    this.sock.on("data", (buf) => {
      const data = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length);
      if (this.onmessage) this.onmessage({ data });
    });
    this.sock.on("error", (err) => {
      if (this.onerror) this.onerror(err);
    });
    this.sock.on("close", () => {
      this.readyState = 3; // CLOSED
      if (this.onclose) this.onclose({ code: 1000, reason: "", wasClean: true });
    });
  }

  send(data) {
    this.sock.write(typeof data === "string" ? data : Buffer.from(data));
  }

  close() {
    this.readyState = 2; // CLOSING
    this.sock.end();
  }

  terminate() {
    this.sock.destroy();
  }
}

function factory() {
  const u = new URL(url);
  if (u.protocol === "tcp:") return () => new TcpSocket(u.hostname, Number(u.port));
  const WebSocket = require("ws");
  return () => new WebSocket(url, ["v12.stomp", "v11.stomp", "v10.stomp"]);
}

const timer = setTimeout(() => {
  console.error("timed out");
  process.exit(2);
}, 15000);
const fail = (what) => {
  console.error(what);
  process.exit(1);
};

const client = new Client({
  webSocketFactory: factory(),
  connectHeaders: { login: "guest", passcode: "guest", host: "/" },
  reconnectDelay: 0,
  heartbeatIncoming: 0,
  heartbeatOutgoing: 0,
  onStompError: (frame) => fail(`ERROR ${frame.headers.message}`),
  onWebSocketError: (err) => fail(`socket error ${err && err.message}`),
});

client.onConnect = (connected) => {
  const got = { version: connected.headers.version, server: connected.headers.server };
  client.subscribe(`/queue/${queue}`, (msg) => {
    got.body = msg.body;
    got.custom = msg.headers["x-custom"];
    got.destination = msg.headers.destination;
    msg.ack();
    const receipt = `out-${queue}`;
    client.watchForReceipt(receipt, () => {
      got.receipt = receipt;
      console.log(JSON.stringify(got));
      client.deactivate().then(() => {
        clearTimeout(timer);
        process.exit(0);
      });
    });
    client.publish({
      destination: `/queue/${queue}-out`,
      body: "from stompjs",
      headers: { persistent: "true", receipt },
    });
  }, { ack: "client-individual" });
  client.publish({ destination: `/queue/${queue}`, body: "round trip",
                   headers: { "x-custom": "yes" } });
};
client.activate();
