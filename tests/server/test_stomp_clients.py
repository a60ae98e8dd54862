"""STOMP clients the way their users use them: @stomp/stompjs from Node (TCP and
WebSockets) and in headless Chromium (Web STOMP at /ws), and the Spring STOMP
relay's patterns with stomp.py (/topic fan-out, /temp-queue request/reply)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.brokerproc import BrokerProcess
from tests.server.stompclient import DEADLINE, connect, stomp_broker, stomp_port

NODE_DIR = Path(__file__).resolve().parent.parent / "node"
STOMPJS = NODE_DIR / "node_modules" / "@stomp" / "stompjs"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with stomp_broker(tmp_path_factory.mktemp("stompclients")) as b:
        yield b


def _first(b: BrokerProcess, queue: str) -> Any:
    """The first message on ``/queue/<queue>``, read with stomp.py."""
    c, rec = connect(b)
    c.subscribe(f"/queue/{queue}", id="drain")
    (m,) = rec.wait_messages(1)
    c.disconnect()
    return m


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_stompjs_from_node(broker: BrokerProcess, transport: str) -> None:
    node = shutil.which("node")
    if node is None or not STOMPJS.is_dir():
        pytest.skip("node or @stomp/stompjs not installed (scripts/test.sh installs them)")
    url = (f"tcp://127.0.0.1:{stomp_port(broker)}" if transport == "tcp"
           else f"ws://127.0.0.1:{broker.admin_port}/ws")
    queue = f"stompjs-{transport}"
    out = subprocess.run([node, str(NODE_DIR / "stomp_client.js"), url, queue],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got == {"version": "1.2", "server": got["server"], "body": "round trip",
                   "custom": "yes", "destination": f"/queue/{queue}",
                   "receipt": f"out-{queue}"}
    assert got["server"].startswith("amqplite/")
    m = _first(broker, f"{queue}-out")
    assert m.body == "from stompjs" and m.headers["persistent"] == "true"


# In the page: stompjs's UMD bundle (prepended) defines StompJs; the script connects to
# /ws with the subprotocols stompjs offers, subscribes, sends, and hands back what came.
PAGE_SCRIPT = """
const [url, queue, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
const client = new StompJs.Client({
  brokerURL: url, connectHeaders: {login: "guest", passcode: "guest", host: "/"},
  reconnectDelay: 0,
  onStompError: (f) => done({error: f.headers.message}),
  onWebSocketError: () => done({error: "websocket error"}),
});
client.onConnect = (connected) => {
  client.subscribe("/queue/" + queue, (msg) => {
    msg.ack();
    const result = {version: connected.headers.version, body: msg.body,
                    protocol: client.webSocket.protocol,
                    destination: msg.headers.destination};
    client.watchForReceipt("browser-out", () => {
      client.deactivate().then(() => done(result));
    });
    client.publish({destination: "/queue/" + queue + "-out", body: "from the browser",
                    headers: {persistent: "true", receipt: "browser-out"}});
  }, {ack: "client"});
  client.publish({destination: "/queue/" + queue, body: "über the browser"});
};
client.activate();
"""


def test_stompjs_in_headless_chromium(broker: BrokerProcess) -> None:
    from tests.admin.browser import make_driver, missing

    if (why := missing()) is not None:
        pytest.skip(why)
    bundle = STOMPJS / "bundles" / "stomp.umd.min.js"
    if not bundle.is_file():
        pytest.skip("@stomp/stompjs not installed (scripts/test.sh installs it)")
    driver = make_driver()
    try:
        driver.set_script_timeout(DEADLINE)
        driver.get(f"http://127.0.0.1:{broker.admin_port}/")  # a page of the broker's origin
        got = driver.execute_async_script(
            bundle.read_text() + "\n" + PAGE_SCRIPT,
            f"ws://127.0.0.1:{broker.admin_port}/ws", "browser")
    finally:
        driver.quit()
    assert got == {"version": "1.2", "body": "über the browser", "protocol": "v12.stomp",
                   "destination": "/queue/browser"}
    m = _first(broker, "browser-out")
    assert m.body == "from the browser"


def test_relay_topic_fan_out_to_many_subscribers(broker: BrokerProcess) -> None:
    """Spring's relay: one broker connection per WebSocket session, each subscribed to
    the same /topic; every message reaches every session, in order."""
    subscribers = [connect(broker) for _ in range(20)]
    for i, (c, _) in enumerate(subscribers):
        c.subscribe("/topic/relay.prices", id=f"sub-{i}", receipt=f"subscribed-{i}")
    for i, (_, rec) in enumerate(subscribers):
        rec.wait_receipt(f"subscribed-{i}")
    pub, prec = connect(broker)
    for n in range(10):
        pub.send("/topic/relay.prices", f"tick {n}", receipt=f"tick-{n}")
    prec.wait_receipt("tick-9")
    for _, rec in subscribers:
        got = rec.wait_messages(10)
        assert [m.body for m in got] == [f"tick {n}" for n in range(10)]
        assert {m.headers["destination"] for m in got} == {"/topic/relay.prices"}
    for c, _ in [*subscribers, (pub, prec)]:
        c.disconnect()


def test_relay_temp_queue_rpc(broker: BrokerProcess) -> None:
    """A request with reply-to:/temp-queue/x; the responder answers to the reply-to it
    received; the answer comes back to the requester on the temp-queue subscription."""
    responder, rrec = connect(broker)
    responder.subscribe("/queue/rpc.requests", id="requests", receipt="ready")
    rrec.wait_receipt("ready")
    requester, qrec = connect(broker)
    for n in range(3):
        requester.send("/queue/rpc.requests", f"question {n}",
                       headers={"reply-to": "/temp-queue/answers", "correlation-id": f"c{n}"})
    requests = rrec.wait_messages(3)
    for req in requests:
        reply_to = req.headers["reply-to"]
        assert reply_to.startswith("/reply-queue/")
        responder.send(reply_to, req.body.replace("question", "answer"),
                       headers={"correlation-id": req.headers["correlation-id"]})
    answers = qrec.wait_messages(3)
    assert [(m.body, m.headers["correlation-id"]) for m in answers] == [
        (f"answer {n}", f"c{n}") for n in range(3)]
    assert {m.headers["subscription"] for m in answers} == {"/temp-queue/answers"}
    requester.disconnect()
    responder.disconnect()
