"""STOMP frames: header escaping, the incremental parser and the serializer.

A frame is a command line, header lines, an empty line, a body and a NUL
(STOMP 1.2 "Augmented BNF"). Lines end in LF or, as in 1.2 (and in RabbitMQ
for every version), CR LF; EOLs and NULs between frames are heart-beats and
are skipped. A ``content-length`` header fixes the body's size, so the body
may hold NULs; without it the body ends at the first NUL.

Escaping (``\\n \\c \\\\``, 1.2 adds ``\\r``) applies to 1.1 and 1.2 frames
except CONNECT, STOMP and CONNECTED; 1.0 has none, so a backslash there is
an ordinary character. ``\\r`` is accepted in 1.1 as RabbitMQ accepts it, and
any other escape is an error in 1.1 and 1.2. Commands and headers must be
UTF-8. Repeated headers: the first occurrence wins (1.2 section "Repeated
Header Entries").

Limits are RabbitMQ's (rabbit_stomp_frame.hrl and rabbit_stomp.hrl): a frame
of at most 4 MiB (``stomp.max_frame_size``; the connection lowers it to
64 KiB until login succeeds), 100 distinct headers, 100 KiB per header name
or value, 100 MiB of body, 32 bytes of command. Every violation raises
:class:`FrameError` as soon as it is visible, before the rest of the frame
is buffered, so a hostile peer costs at most one frame's limit of memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from amqplite.protocol.stomp.errors import FrameError

V10 = "1.0"
V11 = "1.1"
V12 = "1.2"
SUPPORTED_VERSIONS = (V10, V11, V12)

# frames whose headers are never escaped, in any version
UNESCAPED_COMMANDS = frozenset({"CONNECT", "STOMP", "CONNECTED"})
CLIENT_COMMANDS = frozenset({
    "CONNECT", "STOMP", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK",
    "BEGIN", "COMMIT", "ABORT", "DISCONNECT",
})
SERVER_COMMANDS = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})

MAX_COMMAND_LENGTH = 32  # the longest command, UNSUBSCRIBE, is 11 bytes
DEFAULT_MAX_FRAME_SIZE = 4 * 1024 * 1024
DEFAULT_MAX_FRAME_SIZE_UNAUTHENTICATED = 65_536
DEFAULT_MAX_HEADER_LENGTH = 100 * 1024
DEFAULT_MAX_HEADERS = 100
DEFAULT_MAX_BODY_LENGTH = 100 * 1024 * 1024

_LF = 0x0A
_CR = 0x0D
_NUL = 0x00


class Frame:
    """One frame. ``headers`` keeps the first occurrence of each name, in order.

    A plain class (value equality and repr as attrs gave it): one is built per
    frame read, natively when compiled (an attrs ``factory`` default also failed
    mypyc's import-time type check)."""

    __slots__ = ("body", "command", "headers")

    def __init__(self, command: str, headers: dict[str, str] | None = None,
                 body: bytes = b"") -> None:
        self.command = command
        self.headers: dict[str, str] = {} if headers is None else headers
        self.body = body

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return (self.command == other.command and self.headers == other.headers
                and self.body == other.body)

    __hash__ = None  # type: ignore[assignment]  # its headers are a dict

    def __repr__(self) -> str:
        return f"Frame(command={self.command!r}, headers={self.headers!r}, body={self.body!r})"


class ParserLimits:
    """What the parser accepts (RabbitMQ's defaults)."""

    __slots__ = ("max_body_length", "max_frame_size", "max_header_length", "max_headers")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 max_header_length: int = DEFAULT_MAX_HEADER_LENGTH,
                 max_headers: int = DEFAULT_MAX_HEADERS,
                 max_body_length: int = DEFAULT_MAX_BODY_LENGTH) -> None:
        self.max_frame_size = max_frame_size
        self.max_header_length = max_header_length
        self.max_headers = max_headers
        self.max_body_length = max_body_length

    def _values(self) -> tuple[int, int, int, int]:
        return (self.max_frame_size, self.max_header_length, self.max_headers,
                self.max_body_length)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ParserLimits):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return ("ParserLimits(max_frame_size={}, max_header_length={}, max_headers={}, "
                "max_body_length={})".format(*self._values()))


# ------------------------------------------------------------------ escaping

_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"})
# 1.0 cannot carry CR or LF in a header, nor a colon in a name: blank them so
# the frame stays well formed (RabbitMQ escapes regardless, which 1.0 clients
# read as literal backslashes)
_V10_VALUE = str.maketrans({"\n": " ", "\r": " "})
_V10_NAME = str.maketrans({"\n": " ", "\r": " ", ":": "_"})
_UNESCAPES = {"n": "\n", "c": ":", "\\": "\\", "r": "\r"}


def escapes(command: str, version: str | None) -> bool:
    """Whether headers of ``command`` are escaped in ``version``."""
    return version in (V11, V12) and command not in UNESCAPED_COMMANDS


def escape(text: str) -> str:
    """1.1/1.2 escaping (``\\r`` too: RabbitMQ sends it to 1.1 clients as well)."""
    return translated(text, _ESCAPES)


def translated(text: str, table: dict[int, str]) -> str:
    """``text.translate(table)`` for one of the header tables, skipped when
    ``text`` holds no character any of them changes (the common header): a
    dict table costs ``str.translate`` a KeyError raised and cleared for every
    character it keeps, which made escaping most of a MESSAGE's encoding."""
    if table and ("\\" in text or "\n" in text or "\r" in text or ":" in text):
        return text.translate(table)
    return text


def unescape(raw: str) -> str:
    """Undo 1.1/1.2 escaping; an undefined escape is a FrameError."""
    if "\\" not in raw:
        return raw
    out = []
    i = 0
    n = len(raw)
    while i < n:
        j = raw.find("\\", i)
        if j < 0:
            out.append(raw[i:])
            break
        out.append(raw[i:j])
        code = raw[j + 1 : j + 2]
        char = _UNESCAPES.get(code)
        if char is None:
            raise FrameError(f"undefined escape sequence '\\{code}' in a header")
        out.append(char)
        i = j + 2
    return "".join(out)


# ------------------------------------------------------------------ serializing

_NO_ESCAPES: dict[int, str] = {}


def header_tables(command: str, version: str | None) -> tuple[dict[int, str], dict[int, str]]:
    """The ``str.translate`` tables for header names and values of ``command`` in
    ``version``: one C call per string, no Python call per header on the hot path."""
    if escapes(command, version):
        return _ESCAPES, _ESCAPES
    if version == V10:
        return _V10_NAME, _V10_VALUE
    return _NO_ESCAPES, _NO_ESCAPES


def serialize(
    command: str,
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    body: bytes = b"",
    version: str | None = V12,
    *,
    trailing_lf: bool = True,
) -> bytes:
    """Encode one frame for a peer speaking ``version``.

    ``content-length`` is computed, never taken from ``headers``: it is set
    whenever there is a body, and always on MESSAGE. ``trailing_lf`` adds an
    EOL after the NUL as RabbitMQ does by default (``stomp.trailing_lf``).
    """
    items = headers.items() if isinstance(headers, Mapping) else headers
    name_tr, value_tr = header_tables(command, version)
    lines = [f"{translated(k, name_tr)}:{translated(v, value_tr)}"
             for k, v in items if k != "content-length"]
    if body or command == "MESSAGE":
        lines.append(f"content-length:{len(body)}")
    head = "\n".join((command, *lines, "", ""))
    return b"".join((head.encode(), body, b"\x00\n" if trailing_lf else b"\x00"))


def encode_frame(frame: Frame, version: str | None = V12, *, trailing_lf: bool = True) -> bytes:
    return serialize(frame.command, frame.headers, frame.body, version, trailing_lf=trailing_lf)


# ------------------------------------------------------------------ parsing

_NOISE, _HEAD, _BODY = 0, 1, 2
# a NUL ends a frame, and no command holds one: the frame ended before its command
# line did. Refused at once, not left waiting for an LF that will never come
_NUL_IN_COMMAND = "frame ended (NUL) inside its command line"


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError(f"{what} is not valid UTF-8") from None


class FrameParser:
    """Frame a STOMP byte stream incrementally: ``receive`` bytes, then take
    frames with ``next_frame`` until it returns None.

    ``version`` decides escaping and is set by the connection once CONNECT
    negotiated it (None before: nothing is unescaped). ``max_frame_size`` may
    change between frames (the connection raises it after login). After an
    error the parser is poisoned: every later call raises the same error.
    """

    __slots__ = (
        "_body_start", "_buf", "_command", "_error", "_headers", "_length", "_line",
        "_phase", "_pos", "_scan", "_start", "limits", "max_frame_size", "version",
    )

    def __init__(self, limits: ParserLimits | None = None, version: str | None = None) -> None:
        self.limits = limits or ParserLimits()
        self.max_frame_size = self.limits.max_frame_size
        self.version = version
        self._buf = bytearray()
        self._pos = 0  # first byte not yet consumed
        self._error: FrameError | None = None
        self._reset()

    def _reset(self) -> None:
        self._phase = _NOISE
        self._start = 0  # first byte of the frame's command
        self._line = 0  # next line to read in the head
        self._command: str | None = None
        self._headers: dict[str, str] = {}
        self._body_start = 0
        self._length: int | None = None
        self._scan = 0  # where the search for the NUL resumes

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed."""
        return len(self._buf) - self._pos

    @property
    def in_frame(self) -> bool:
        """True between a frame's first byte and its NUL."""
        return self._phase != _NOISE

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is None:  # a poisoned parser keeps nothing
            self._buf += data

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add bytes and return every frame now complete (raises on the first bad one)."""
        self.receive(data)
        return list(iter(self.next_frame, None))

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None until more bytes arrive."""
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except FrameError as err:
            self._error = err
            self._buf = bytearray()  # nothing more will be read: free it
            self._pos = 0
            raise

    def _next(self) -> Frame | None:
        buf = self._buf
        end = len(buf)
        if self._phase == _NOISE:
            pos = self._pos
            while pos < end:
                b = buf[pos]
                if b in (_LF, _NUL):
                    pos += 1
                elif b == _CR:
                    if pos + 1 == end:
                        break
                    if buf[pos + 1] != _LF:
                        raise FrameError("CR not followed by LF between frames")
                    pos += 2
                else:
                    self._phase = _HEAD
                    self._start = self._line = pos
                    break
            self._pos = pos
            if self._phase == _NOISE:
                self._compact()
                return None
        if self._phase == _HEAD and not (
            (self._command is None and self._fast_head(buf)) or self._read_head(buf, end)
        ):
            return None
        return self._read_body(buf, end)

    def _read_head(self, buf: bytearray, end: int) -> bool:
        """Parse complete head lines; True once the empty line ending the headers is read."""
        limits = self.limits
        while True:
            line = self._line
            lf = buf.find(b"\n", line)
            if lf < 0:
                partial = end - line
                if self._command is None:
                    if partial > MAX_COMMAND_LENGTH + 1:
                        raise FrameError(f"command longer than {MAX_COMMAND_LENGTH} bytes")
                    if buf.find(b"\x00", line, end) >= 0:  # junk then NUL: no LF will come
                        raise FrameError(_NUL_IN_COMMAND)
                elif partial > 2 * limits.max_header_length + 3:
                    raise FrameError(
                        f"header longer than {limits.max_header_length} bytes", "Header too long"
                    )
                self._check_size(end)
                return False
            self._check_size(lf + 1)
            stop = lf - 1 if lf > line and buf[lf - 1] == _CR else lf
            raw = bytes(buf[line:stop])
            self._line = lf + 1
            if b"\r" in raw:
                raise FrameError("CR not followed by LF in a frame's head")
            if self._command is None:
                if len(raw) > MAX_COMMAND_LENGTH:
                    raise FrameError(f"command longer than {MAX_COMMAND_LENGTH} bytes")
                if b"\x00" in raw:
                    raise FrameError(_NUL_IN_COMMAND)
                self._command = _text(raw, "command")
                continue
            if not raw:
                self._enter_body()
                return True
            self._add_header(raw)

    def _fast_head(self, buf: bytearray) -> bool:
        """Read the whole head at once when it is all buffered, LF-only and ASCII
        (the common case); False leaves everything to ``_read_head``, which
        also gives any error its precise text."""
        start = self._start
        stop = buf.find(b"\n\n", start)
        if stop < 0 or stop + 2 - start > self.max_frame_size:
            return False
        raw = bytes(buf[start:stop])
        if b"\r" in raw or not raw.isascii():
            return False
        command, *lines = raw.decode("ascii").split("\n")
        if len(command) > MAX_COMMAND_LENGTH or "\x00" in command:
            return False
        self._command = command
        if (b"\\" in raw and escapes(command, self.version)) or len(lines) > self.limits.max_headers:
            for line in lines:  # escapes to undo, or perhaps too many headers: check each
                self._text_header(line)
        else:
            headers = self._headers
            longest = self.limits.max_header_length
            for line in lines:
                name, colon, value = line.partition(":")
                if not colon or not name or len(name) > longest or len(value) > longest:
                    self._text_header(line)  # raises the precise error
                if name not in headers:  # repeated header: the first occurrence wins
                    headers[name] = value
        self._line = stop + 2
        self._enter_body()
        return True

    def _text_header(self, line: str) -> None:
        name, colon, value = line.partition(":")
        if not colon:
            raise FrameError(f"header line without a colon: {line[:64].encode()!r}")
        self._header(name, value, len(name), len(value))

    def _add_header(self, raw: bytes) -> None:
        colon = raw.find(b":")
        if colon < 0:
            raise FrameError(f"header line without a colon: {raw[:64]!r}")
        name = _text(raw[:colon], "header name")
        value = _text(raw[colon + 1 :], "header value")
        self._header(name, value, colon, len(raw) - colon - 1)

    def _header(self, name: str, value: str, name_bytes: int, value_bytes: int) -> None:
        """Check and keep one header; the lengths are of the raw (escaped) bytes, as RabbitMQ counts."""
        limits = self.limits
        if not name_bytes:
            raise FrameError("header with an empty name")
        if name_bytes > limits.max_header_length or value_bytes > limits.max_header_length:
            raise FrameError(f"header longer than {limits.max_header_length} bytes", "Header too long")
        assert self._command is not None
        if escapes(self._command, self.version):
            name = unescape(name)
            value = unescape(value)
        headers = self._headers
        if name in headers:
            return  # repeated header: the first occurrence wins
        if len(headers) >= limits.max_headers:
            raise FrameError(f"more than {limits.max_headers} headers", "Too many headers")
        headers[name] = value

    def _enter_body(self) -> None:
        self._phase = _BODY
        self._body_start = self._scan = self._line
        raw = self._headers.get("content-length")
        if raw is None:
            return
        text = raw.strip()
        if not text.isdigit() or not text.isascii():
            raise FrameError(f"invalid content-length header: {raw[:32]!r}")
        length = int(text)
        if length > self.limits.max_body_length:
            raise FrameError(f"body longer than {self.limits.max_body_length} bytes", "Frame too large")
        self._check_size(self._body_start + length + 1)
        self._length = length

    def _read_body(self, buf: bytearray, end: int) -> Frame | None:
        start = self._body_start
        length = self._length
        if length is not None:
            nul = start + length
            if nul >= end:
                return None
            if buf[nul] != _NUL:
                raise FrameError("frame not terminated by NUL after content-length bytes")
        else:
            nul = buf.find(b"\x00", self._scan)
            seen = end if nul < 0 else nul
            if seen - start > self.limits.max_body_length:
                raise FrameError(f"body longer than {self.limits.max_body_length} bytes", "Frame too large")
            self._check_size(seen if nul < 0 else nul + 1)
            if nul < 0:
                self._scan = end
                return None
        assert self._command is not None
        frame = Frame(self._command, self._headers, bytes(buf[start:nul]))
        self._pos = nul + 1
        self._reset()
        self._compact()
        return frame

    def _check_size(self, upto: int) -> None:
        """Raise when the frame (command to NUL) would exceed max_frame_size."""
        if upto - self._start > self.max_frame_size:
            raise FrameError(f"frame larger than {self.max_frame_size} bytes", "Frame too large")

    def _compact(self) -> None:
        """Drop consumed bytes between frames (offsets are only kept within one)."""
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif self._pos > 65_536:
            del self._buf[: self._pos]
            self._pos = 0


def parse_all(data: bytes, version: str | None = V12, limits: ParserLimits | None = None) -> list[Frame]:
    """Every frame of a complete byte string (tests, tools); a partial frame at the end is an error."""
    parser = FrameParser(limits, version)
    frames = parser.feed(data)
    if parser.in_frame:
        raise FrameError("truncated frame")
    return frames
