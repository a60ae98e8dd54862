// MQTT.js over WebSockets (/ws) or TCP against amqplite: connect, subscribe, publish at
// QoS 1 to the subscribed filter, and print the message that comes back as JSON.
// Usage: node mqtt_ws.js ws://127.0.0.1:PORT/ws|mqtt://127.0.0.1:PORT TOPIC PROTOCOL_VERSION
"use strict";
const mqtt = require("mqtt");

const [url, topic, version] = process.argv.slice(2);
const level = Number(version);
const options = {
  username: "guest",
  password: "guest",
  protocolVersion: level,
  reconnectPeriod: 0,
  connectTimeout: 10000,
  clean: true,
};
if (level === 3) options.protocolId = "MQIsdp"; // MQTT 3.1: subprotocol "mqttv3.1"

const timer = setTimeout(() => {
  console.error("timed out");
  process.exit(2);
}, 15000);
const client = mqtt.connect(url, options);
let granted = null;
client.on("error", (err) => {
  console.error(String(err));
  process.exit(1);
});
client.on("connect", () => {
  client.subscribe(`${topic}/+`, { qos: 1 }, (err, grants) => {
    if (err) throw err;
    granted = grants.map((g) => g.qos);
    client.publish(`${topic}/node`, "from mqtt.js", { qos: 1 }, (perr) => {
      if (perr) throw perr;
    });
  });
});
client.on("message", (t, payload, packet) => {
  console.log(JSON.stringify({ topic: t, payload: payload.toString(), qos: packet.qos, granted }));
  client.end(false, () => {
    clearTimeout(timer);
    process.exit(0);
  });
});
