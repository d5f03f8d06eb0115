"""STOMP 1.2 frames: the byte-level parser and serializer. No I/O.

Theory of operation
-------------------
A `FrameParser` owns a byte buffer. The caller appends whatever bytes arrived
(`receive_data`, chunks split anywhere) and calls `next_frame()` until it returns None (no
complete frame buffered yet). Each frame is

    COMMAND EOL  *(name:value EOL)  EOL  body NUL  *(EOL)

with EOL = LF or CR LF. EOLs between frames are heart-beats and are skipped. The body is
exactly `content-length` octets (it may hold NULs) followed by a NUL, or, without that
header, everything up to the first NUL.

Rules this file keeps:
* header names and values are UTF-8 and use the 1.2 escapes (\\r \\n \\c \\\\); any other
  backslash sequence is an error. CONNECT, STOMP and CONNECTED frames are not escaped.
* a repeated header: the first occurrence wins.
* limits (frame size, header count, header line length) are checked while bytes arrive, so
  a hostile peer cannot make the buffer grow past `max_frame_size` plus one chunk.
* every malformed input raises `ProtocolError` (never another exception) and the parser
  stays broken afterwards: STOMP closes the connection after an error, so there is no
  resynchronisation to get wrong.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

CLIENT_COMMANDS = frozenset(
    {
        "CONNECT",
        "STOMP",
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ACK",
        "NACK",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "DISCONNECT",
    }
)
SERVER_COMMANDS = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
# frames whose headers are sent raw (STOMP 1.2, "Value Encoding")
UNESCAPED_COMMANDS = frozenset({"CONNECT", "STOMP", "CONNECTED"})
# only these may carry a body
BODY_COMMANDS = frozenset({"SEND", "MESSAGE", "ERROR"})

HEARTBEAT = b"\n"
DEFAULT_MAX_FRAME_SIZE = 8 * 1024 * 1024 + 64 * 1024  # the engine's 8 MiB body + headers
DEFAULT_MAX_HEADERS = 1000  # the engine's limit of headers on one message
DEFAULT_MAX_HEADER_LENGTH = 10 * 1024  # one `name:value` line, in bytes

_HEADER_END = re.compile(rb"\n\r?\n")
_BETWEEN_FRAMES = frozenset(b"\r\n\x00")  # heart-beat EOLs and empty frames
_ESCAPE_SEQUENCE = re.compile(r"\\(.?)", re.DOTALL)
_UNESCAPES = {"r": "\r", "n": "\n", "c": ":", "\\": "\\"}


class ProtocolError(Exception):
    """A peer broke the STOMP grammar or a limit. `message` is short (it becomes the ERROR
    frame's `message` header); `detail` explains (it becomes the ERROR frame's body);
    `receipt` is the offending frame's receipt header, when it could be read."""

    def __init__(self, message: str, detail: str = "", receipt: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.receipt = receipt


class Frame(NamedTuple):
    """One STOMP frame. `headers` keeps the first value of each name, in arrival order.
    A NamedTuple (as the actions are, actions.py): every frame a client sends makes one."""

    command: str
    headers: Mapping[str, str] = MappingProxyType({})
    body: bytes = b""


def _shown(text: str | bytes, limit: int = 40) -> str:
    """Text as an error message may quote it: short and printable."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    shown = text[:limit] + ("..." if len(text) > limit else "")
    return repr(shown)


def _quoted(text: bytes, limit: int = 40) -> str:
    """A command line as an ERROR body quotes it: in double quotes, short and printable."""
    shown = text.decode("utf-8", errors="replace")
    shown = shown[:limit] + ("..." if len(shown) > limit else "")
    printable = "".join(c if c.isprintable() else repr(c)[1:-1] for c in shown)
    return f'"{printable}"'


def unescape(text: str) -> str:
    """A header name or value with the 1.2 escapes decoded; undefined escapes are errors."""
    if "\\" not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        sequence = match.group(1)
        try:
            return _UNESCAPES[sequence]
        except KeyError:
            raise ProtocolError(
                "bad escape in header",
                f"the header text {_shown(text)} holds the undefined escape "
                f"{_shown(chr(92) + sequence)}; STOMP 1.2 defines only \\r \\n \\c and \\\\",
            ) from None

    return _ESCAPE_SEQUENCE.sub(replace, text)


def _plain_unescape(text: str) -> str | None:
    """`unescape` without the regular expression, for the parser's fast path: None when
    `text` holds an undefined escape (the slow path then says which). Escaped backslashes
    are split out first, left to right as escapes are read, so every backslash left in a
    piece starts one of the other three escapes."""
    if "\\" not in text:
        return text
    pieces = text.split("\\\\")
    for index, piece in enumerate(pieces):
        if "\\" in piece:
            piece = piece.replace("\\c", ":").replace("\\n", "\n").replace("\\r", "\r")
            if "\\" in piece:
                return None
            pieces[index] = piece
    return "\\".join(pieces)


def escape(text: str) -> str:
    """A header name or value with the 1.2 escapes applied (backslash first)."""
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace(":", "\\c")


def _unbroken(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def serialize(frame: Frame) -> bytes:
    """A frame as bytes. Frames with a body (or ERROR/MESSAGE) get a `content-length`."""
    return serialize_parts(frame.command, frame.headers.items(), frame.body)


def serialize_parts(
    command: str, headers: object, body: bytes = b"", *, escaped: bool = True
) -> bytes:
    """Like `serialize`, from a command, an iterable of (name, value) pairs and a body;
    a `content-length` among the headers is replaced by the body's real length.
    `escaped=False` for STOMP 1.0, which has no escapes: a line break in a header (which
    1.0 cannot carry) becomes a space."""
    pairs = headers if isinstance(headers, list) else list(headers)  # type: ignore[call-overload]
    if command in UNESCAPED_COMMANDS:
        lines = [f"{name}:{value}" for name, value in pairs if name != "content-length"]
        text = "\n".join(lines)
    else:
        # all the names and values escaped at once, in C, rather than one by one: each name
        # is joined to its value by \x01 and each pair to the next by \x00, which escaping
        # leaves alone and which then become the colon and line break. A name or value that
        # holds either sentinel itself (the counts tell) takes the one-by-one way instead.
        lines = [f"{name}\x01{value}" for name, value in pairs if name != "content-length"]
        text = "\x00".join(lines)
        clean = escape if escaped else _unbroken
        if text.count("\x00") == len(lines) - 1 and text.count("\x01") == len(lines):
            text = clean(text).replace("\x01", ":").replace("\x00", "\n")
        elif lines:
            pairs = [pair for pair in pairs if pair[0] != "content-length"]
            text = "\n".join([f"{clean(name)}:{clean(value)}" for name, value in pairs])
    if body or command in BODY_COMMANDS:
        text = f"{text}\ncontent-length:{len(body)}" if lines else f"content-length:{len(body)}"
    head = f"{command}\n{text}\n\n" if text else f"{command}\n\n"
    return b"".join((head.encode("utf-8"), body, b"\x00"))


class FrameParser:
    """Incremental frame parser: `receive_data(chunk)`, then `next_frame()` until None."""

    def __init__(
        self,
        *,
        commands: frozenset[str] = CLIENT_COMMANDS,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_headers: int = DEFAULT_MAX_HEADERS,
        max_header_length: int = DEFAULT_MAX_HEADER_LENGTH,
    ) -> None:
        self.commands = commands
        self.max_frame_size = max_frame_size
        self.max_headers = max_headers
        self.max_header_length = max_header_length
        # False for STOMP 1.0 (no header escapes: a backslash is a backslash)
        self.escapes = True
        self._buffer = bytearray()
        # where the next frame starts in the buffer: consumed frames are dropped in one cut
        # when the buffer runs dry, not one memmove per frame
        self._pos = 0
        self._broken: ProtocolError | None = None
        # where the next search for the end of the header block / the NUL starts, so a frame
        # arriving in many small chunks is scanned once, not once per chunk
        self._scan = 0
        self._head_lines = 0  # LFs counted so far in a header block still arriving
        # a parsed header block whose body is still arriving: command, headers, body offset
        # from the frame's start, content-length
        self._head: tuple[str, dict[str, str], int, int | None] | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame (heart-beat EOLs included)."""
        return len(self._buffer) - self._pos

    def receive_data(self, data: bytes) -> None:
        self._buffer += data

    def partial_receipt(self) -> str | None:
        """The `receipt` header of a frame that has not fully arrived, when its line has:
        for the ERROR that ends such a frame (a limit broken while its header block
        arrives, a WebSocket message ending inside it)."""
        if self._head is not None:
            return self._head[1].get("receipt")
        block = bytes(self._buffer[self._pos :])
        start = block.find(b"\nreceipt:")
        end = block.find(b"\n", start + 1)
        if start < 0 or end < 0:
            return None
        try:
            value = block[start + len(b"\nreceipt:") : end].removesuffix(b"\r").decode("utf-8")
            raw = block.split(b"\n", 1)[0].removesuffix(b"\r") in (b"CONNECT", b"STOMP")
            return value if raw else unescape(value)
        except (UnicodeDecodeError, ProtocolError):
            return None

    def at_frame_boundary(self) -> bool:
        """True when nothing but heart-beat EOLs is buffered (no partial frame)."""
        return not self._buffer[self._pos :].strip(b"\r\n")

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None when more bytes are needed."""
        if self._broken is not None:
            raise self._broken
        try:
            parsed = self._next_frame()
        except ProtocolError as error:
            self._broken = error
            raise
        if parsed is None and self._pos:
            self._compact()
        return parsed

    def _compact(self) -> None:
        pos = self._pos
        del self._buffer[:pos]
        self._pos = 0
        self._scan = max(self._scan - pos, 0)

    def _next_frame(self) -> Frame | None:
        buffer = self._buffer
        if self._head is None:
            pos = self._pos
            if pos < len(buffer) and buffer[pos] in _BETWEEN_FRAMES:
                pos = self._skip_heartbeats()
                if pos != self._pos:
                    self._pos = pos
                    self._scan = max(self._scan, pos)
                    self._head_lines = 0
            if pos == len(buffer):
                return None
            # the header block's end: a blank line. An LF LF is found faster than the
            # pattern; a CR before it means the block may end at an LF CR LF first
            start = max(self._scan - 2, pos)
            head_end = buffer.find(b"\n\n", start)
            if head_end >= 0 and buffer.find(b"\r", start, head_end) < 0:
                body_offset = head_end + 2
            else:
                match = _HEADER_END.search(buffer, start)
                if match is None:
                    self._check_partial_head()
                    self._scan = len(buffer)
                    return None
                head_end, body_offset = match.start(), match.end()
            self._head = self._parse_head(buffer[pos:head_end], body_offset - pos)
            self._scan = body_offset
            self._head_lines = 0
        pos = self._pos
        command, headers, body_offset, length = self._head
        body_start = pos + body_offset
        if length is not None:
            end = body_start + length
            if len(buffer) <= end:
                return None
            if buffer[end] != 0:
                raise ProtocolError(
                    "frame not terminated by NUL",
                    f"the {command} frame's content-length is {length}, but the octet after "
                    "that many body octets is not the NUL that must end the frame",
                    headers.get("receipt"),
                )
        else:
            end = buffer.find(b"\x00", self._scan)
            if end < 0:
                if len(buffer) - pos > self.max_frame_size:
                    raise self._too_large(command, headers)
                self._scan = len(buffer)
                return None
        if end + 1 - pos > self.max_frame_size:
            raise self._too_large(command, headers)
        body = bytes(buffer[body_start:end])
        self._pos = self._scan = end + 1
        self._head = None
        if body and command not in BODY_COMMANDS:
            if not body.strip(b"\r\n"):  # an extra EOL before the NUL (RabbitMQ takes it)
                return Frame(command, headers, b"")
            raise ProtocolError(
                f"a {command} frame must not have a body",
                f"only SEND, MESSAGE and ERROR frames carry a body; this {command} frame "
                f"carried {len(body)} octets",
                headers.get("receipt"),
            )
        return Frame(command, headers, body)

    def _skip_heartbeats(self) -> int:
        """Where the next frame starts after the heart-beat EOLs at `_pos` (and NUL octets:
        empty frames, as RabbitMQ skips them)."""
        buffer = self._buffer
        index = self._pos
        size = len(buffer)
        while index < size:
            octet = buffer[index]
            if octet == 10 or octet == 0:
                index += 1
            elif octet == 13:
                if index + 1 >= size:
                    break  # a CR whose LF has not arrived yet
                if buffer[index + 1] != 10:
                    raise ProtocolError(
                        "malformed frame", "a CR between frames must be followed by LF"
                    )
                index += 2
            else:
                break
        return index

    def _too_large(self, command: str, headers: Mapping[str, str]) -> ProtocolError:
        return ProtocolError(
            "frame too large",
            f"the {command} frame is larger than the limit of {self.max_frame_size} bytes",
            headers.get("receipt"),
        )

    def _check_partial_head(self) -> None:
        """Limits on a header block that has not fully arrived yet."""
        buffer = self._buffer
        if len(buffer) - self._pos > self.max_frame_size:
            raise ProtocolError(
                "frame too large",
                f"the frame's headers exceed the limit of {self.max_frame_size} bytes",
                self.partial_receipt(),
            )
        last_line = len(buffer) - max(buffer.rfind(b"\n") + 1, self._pos)
        if last_line > self.max_header_length:
            raise ProtocolError(
                "header too long",
                f"a command or header line is longer than {self.max_header_length} bytes",
                self.partial_receipt(),
            )
        self._head_lines += buffer.count(b"\n", self._scan)
        if self._head_lines > self.max_headers + 1:
            raise ProtocolError(
                "too many headers",
                f"a frame may carry at most {self.max_headers} headers",
                self.partial_receipt(),
            )

    def _parse_head(
        self, head: bytearray, body_offset: int
    ) -> tuple[str, dict[str, str], int, int | None]:
        found = self._plain_head(head)
        if found is not None:
            command, headers = found
        else:
            command, headers = self._checked_head(bytes(head))
        length: int | None = None
        text = headers.get("content-length")
        if text is not None:
            receipt = headers.get("receipt")
            if not (text.isascii() and text.isdigit()) or len(text) > 19:
                raise ProtocolError(
                    "bad content-length",
                    f"content-length must be a non-negative decimal integer, not {_shown(text)}",
                    receipt,
                )
            length = int(text)
            if body_offset + length + 1 > self.max_frame_size:
                raise ProtocolError(
                    "frame too large",
                    f"the {command} frame's content-length of {length} bytes is over the "
                    f"limit of {self.max_frame_size} bytes per frame",
                    receipt,
                )
        return command, headers, body_offset, length

    def _plain_head(self, head: bytearray) -> tuple[str, dict[str, str]] | None:
        """The common case, fast: a short head with no CR, no escapes, valid UTF-8, a known
        command and well-formed headers. None when any of that does not hold: the head is
        then read line by line (`_checked_head`), which says what is wrong."""
        if len(head) > self.max_header_length or b"\r" in head:
            return None
        escaped = self.escapes and b"\\" in head
        try:
            lines = head.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            return None
        command = lines[0]
        if command not in self.commands or len(lines) - 1 > self.max_headers:
            return None
        if escaped and command in UNESCAPED_COMMANDS:
            return None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not name or not colon:
                return None
            if escaped and "\\" in line:  # a 1.2 client escapes the colons of an ack id
                name, value = _plain_unescape(name), _plain_unescape(value)
                if name is None or value is None:
                    return None
            if name not in headers:  # the first of repeated headers counts
                headers[name] = value
        return command, headers

    def _checked_head(self, head: bytes) -> tuple[str, dict[str, str]]:
        lines = head.split(b"\n")
        command_line = lines[0].removesuffix(b"\r")
        try:
            command = command_line.decode("utf-8")
        except UnicodeDecodeError:
            command = ""
        problem: ProtocolError | None = None
        if command not in self.commands:
            # RabbitMQ's words, which programs written for it compare; the connection adds
            # `version:1.0,1.1,1.2`: the commands accepted are those of these versions
            problem = ProtocolError(
                "Bad command", f"Could not interpret command {_quoted(command_line)}\n"
            )
        elif len(lines) - 1 > self.max_headers:
            problem = ProtocolError(
                "too many headers",
                f"the {command} frame carries {len(lines) - 1} headers; the limit is "
                f"{self.max_headers}",
            )
        # headers are read even after a problem, for the receipt-id of the ERROR frame
        raw = command in UNESCAPED_COMMANDS or not self.escapes
        headers: dict[str, str] = {}
        for line in lines[1 : self.max_headers + 1]:
            line = line.removesuffix(b"\r")
            try:
                self._parse_header(command, line, raw, headers)
            except ProtocolError as error:
                problem = problem or error
        if len(command_line) > self.max_header_length:
            problem = problem or ProtocolError(
                "header too long",
                f"the command line is longer than {self.max_header_length} bytes",
            )
        if problem is not None:
            problem.receipt = headers.get("receipt")
            raise problem
        return command, headers

    def _parse_header(self, command: str, line: bytes, raw: bool, headers: dict[str, str]) -> None:
        if len(line) > self.max_header_length:
            raise ProtocolError(
                "header too long",
                f"a header line of the {command} frame is {len(line)} bytes long; the limit "
                f"is {self.max_header_length}",
            )
        colon = line.find(b":")
        if colon <= 0:
            raise ProtocolError(
                "malformed header",
                f"the {command} frame's header line {_shown(line)} is not `name:value`"
                + (" (the name is empty)" if colon == 0 else ""),
            )
        if b"\r" in line:
            raise ProtocolError(
                "malformed header",
                f"the {command} frame's header line {_shown(line)} holds a bare CR; "
                "escape it as \\r",
            )
        try:
            name = line[:colon].decode("utf-8")
            value = line[colon + 1 :].decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(
                "malformed header",
                f"the {command} frame's header line {_shown(line)} is not valid UTF-8",
            ) from None
        if not raw:
            name = unescape(name)
            value = unescape(value)
        headers.setdefault(name, value)
