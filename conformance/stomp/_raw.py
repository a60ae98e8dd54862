"""A raw STOMP client for the conformance suite: frames written and read by hand
(no amqplite code), so the tests see exactly what each broker sends."""

from __future__ import annotations

import socket
import time

DEADLINE = 10.0


class Frame:
    def __init__(self, command: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.command = command
        self.header_list = headers
        self.headers: dict[str, str] = {}
        for k, v in headers:
            self.headers.setdefault(k, v)  # the first of a repeated header wins
        self.body = body

    def __repr__(self) -> str:
        return f"Frame({self.command!r}, {self.header_list!r}, {self.body!r})"


def encode(command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [command, *(f"{k}:{v}" for k, v in (headers or {}).items())]
    return ("\n".join(lines) + "\n\n").encode() + body + b"\0"


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            out.append({"n": "\n", "c": ":", "\\": "\\", "r": "\r"}.get(value[i + 1], ""))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


class RawStomp:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=DEADLINE)
        self.buf = b""
        self.closed = False

    def send(self, command: str, headers: dict[str, str] | None = None,
             body: bytes = b"") -> None:
        self.sock.sendall(encode(command, headers, body))

    def _fill(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return False
        except (ConnectionResetError, OSError):
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self.buf += chunk
        return True

    def frame(self, timeout: float = DEADLINE) -> Frame:
        """The next frame (heart-beat EOLs skipped); AssertionError if none comes."""
        deadline = time.monotonic() + timeout
        while True:
            self.buf = self.buf.lstrip(b"\r\n")
            head_end = self.buf.find(b"\n\n")
            if head_end >= 0:
                lines = self.buf[:head_end].decode().replace("\r", "").split("\n")
                command, headers = lines[0], []
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers.append((_unescape(k), _unescape(v)))
                length = dict(headers).get("content-length")
                start = head_end + 2
                if length is not None:
                    end = start + int(length)
                    if len(self.buf) > end:
                        body, self.buf = self.buf[start:end], self.buf[end + 1:]
                        return Frame(command, headers, body)
                else:
                    nul = self.buf.find(b"\0", start)
                    if nul >= 0:
                        body, self.buf = self.buf[start:nul], self.buf[nul + 1:]
                        return Frame(command, headers, body)
            if not self._fill(deadline):
                raise AssertionError(f"no frame within {timeout}s (closed={self.closed}, "
                                     f"buffered={self.buf!r})")

    def expect(self, command: str, timeout: float = DEADLINE) -> Frame:
        f = self.frame(timeout)
        assert f.command == command, f
        return f

    def close(self) -> None:
        self.sock.close()
