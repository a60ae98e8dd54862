"""Run a real amqplite broker as a subprocess on a free loopback port."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: test brokers listen below the kernel's ephemeral range (32768-60999 on Linux): a
#: port from bind(0) can be a client socket's local port a moment later, or a
#: connect to it before the broker listens can connect to itself (TCP self-connect),
#: and a readiness check then "succeeds" against nothing. 25700-25999 is left to
#: the conformance runs and throwaway RabbitMQ nodes.
_PORTS = [*range(10000, 25700), *range(26000, 32000)]


def free_port() -> int:
    """A loopback port nothing listens on or is bound to now, outside the ephemeral range."""
    for _ in range(200):
        port = random.choice(_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port below the ephemeral range")


def wait_for(pred, timeout: float = 20.0, interval: float = 0.02, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll ``pred`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class BrokerProcess:
    def __init__(self, data_dir: Path, port: int | None = None, *extra: str,
                 env: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.extra = list(extra)
        self.env = env or {}
        self.admin_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / f"broker-{self.port}.log"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def admin_url(self) -> str | None:
        """The admin API, unless the extra arguments chose their own port."""
        return None if "--admin-port" in self.extra else f"http://127.0.0.1:{self.admin_port}"

    def start(self) -> BrokerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        # MQTT's, STOMP's and Kafka's default ports (1883, 61613, 9092) are one for the
        # whole machine: brokers under test run in parallel (and beside a system
        # Mosquitto or RabbitMQ), so MQTT, STOMP and Kafka are off unless asked for
        mqtt = [] if "--mqtt-port" in self.extra else ["--mqtt-port", "0"]
        mqtt += [] if "--stomp-port" in self.extra else ["--stomp-port", "0"]
        mqtt += [] if "--kafka-port" in self.extra else ["--kafka-port", "0"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1",
                 "--port", str(self.port), "--data-dir", str(self.data_dir),
                 "--admin-port", str(self.admin_port), "--log-level", "info", *mqtt,
                 *self.extra],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )

        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited early:\n{self.log()}")
            ports = [self.port] if self.admin_url is None else [self.port, self.admin_port]
            try:
                for p in ports:
                    socket.create_connection(("127.0.0.1", p), timeout=0.5).close()
                return True
            except OSError:
                return False

        wait_for(up, 30, what="broker to listen")
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no flush, no goodbye — what a crash looks like."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM: the graceful path; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return int(self.proc.returncode)

    def rss_bytes(self) -> int:
        import psutil

        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)
