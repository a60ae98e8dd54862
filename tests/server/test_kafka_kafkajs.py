"""kafkajs (Node.js) against a broker subprocess (issue 37): CreateTopics with 3
partitions, an idempotent ``acks=-1`` producer, a consumer group reading every
record. Skipped unless ``node`` can load kafkajs (``npm install kafkajs``; a
``NODE_PATH`` naming its node_modules also does)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.server.kafkaclient import bootstrap, kafka_broker

SCRIPT = """
const { Kafka, logLevel } = require('kafkajs');
const kafka = new Kafka({ clientId: 'kjs', brokers: [process.argv[1]], logLevel: logLevel.ERROR });
(async () => {
  const admin = kafka.admin(); await admin.connect();
  await admin.createTopics({ topics: [{ topic: 'kjs', numPartitions: 3 }] });
  await admin.disconnect();
  const p = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await p.connect();
  for (let i = 0; i < 30; i++)
    await p.send({ topic: 'kjs', acks: -1, messages: [{ key: 'k' + (i % 5), value: 'v' + i }] });
  await p.disconnect();
  const c = kafka.consumer({ groupId: 'kjs-group' });
  await c.connect(); await c.subscribe({ topic: 'kjs', fromBeginning: true });
  const seen = new Set();
  await new Promise((resolve, reject) => {
    setTimeout(() => reject(new Error('only ' + seen.size + ' records in time')), 30000);
    c.run({ eachMessage: async ({ message }) => {
      seen.add(message.value.toString()); if (seen.size === 30) resolve(); } });
  });
  await c.disconnect();
  console.log(seen.size);
})().catch(e => { console.error(e); process.exit(1); });
"""


#: tests/node, where scripts/test.sh installs kafkajs (package.json)
NODE_DIR = Path(__file__).resolve().parent.parent / "node"


def kafkajs_missing() -> bool:
    if shutil.which("node") is None:
        return True
    found = subprocess.run(["node", "-e", "require.resolve('kafkajs')"], capture_output=True,
                           timeout=30, cwd=NODE_DIR)
    return found.returncode != 0


@pytest.mark.skipif(kafkajs_missing(), reason="node cannot load kafkajs")
def test_kafkajs_produces_and_reads_in_a_group(tmp_path: Path) -> None:
    with kafka_broker(tmp_path / "data") as b:
        out = subprocess.run(["node", "-e", SCRIPT, bootstrap(b)], capture_output=True,
                             timeout=90, text=True, cwd=NODE_DIR)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "30"
