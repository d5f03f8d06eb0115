"""The frame grammar of STOMP 1.2, one rule per test (xumpweb/stomp/frames.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xumpweb.stomp.frames import Frame, FrameParser, ProtocolError, escape, serialize, unescape


def parse_all(data: bytes, **limits: int) -> list[Frame]:
    parser = FrameParser(**limits)
    parser.receive_data(data)
    frames = []
    while (parsed := parser.next_frame()) is not None:
        frames.append(parsed)
    return frames


def parse_error(data: bytes, **limits: int) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        parse_all(data, **limits)
    return caught.value


def test_a_frame_has_command_headers_and_body_up_to_nul() -> None:
    (parsed,) = parse_all(b"SEND\ndestination:/queue/a\n\nhello\x00")
    assert parsed == Frame("SEND", {"destination": "/queue/a"}, b"hello")


def test_crlf_line_ends_are_accepted() -> None:
    (parsed,) = parse_all(b"SEND\r\ndestination:/queue/a\r\nx:y\r\n\r\nhi\x00")
    assert parsed == Frame("SEND", {"destination": "/queue/a", "x": "y"}, b"hi")


def test_heartbeat_eols_between_frames_are_skipped() -> None:
    data = b"\n\r\n\nBEGIN\ntransaction:t\n\n\x00\n\n\r\nABORT\ntransaction:t\n\n\x00\n"
    assert [f.command for f in parse_all(data)] == ["BEGIN", "ABORT"]


def test_a_stray_nul_between_frames_is_skipped_as_rabbitmq_does() -> None:
    """An empty frame (a client that ends a frame twice): RabbitMQ takes what follows,
    and its parsing tests send one before a SUBSCRIBE."""
    data = b"\n\x00SUBSCRIBE\nid:1\ndestination:/queue/a\n\n\x00\n\x00\x00SEND\n\n\x00"
    assert [f.command for f in parse_all(data)] == ["SUBSCRIBE", "SEND"]


def test_content_length_body_may_hold_nul_octets() -> None:
    (parsed,) = parse_all(b"SEND\ncontent-length:5\n\na\x00b\x00c\x00")
    assert parsed.body == b"a\x00b\x00c"


def test_content_length_must_be_followed_by_nul() -> None:
    error = parse_error(b"SEND\ncontent-length:2\nreceipt:r9\n\nabc\x00")
    assert error.message == "frame not terminated by NUL"
    assert error.receipt == "r9"


@pytest.mark.parametrize("length", ["-1", "abc", "1.5", " 3", "99999999999999999999"])
def test_content_length_must_be_a_non_negative_integer(length: str) -> None:
    error = parse_error(f"SEND\ncontent-length:{length}\n\n\x00".encode())
    assert error.message == "bad content-length"


def test_the_first_of_repeated_headers_wins() -> None:
    (parsed,) = parse_all(b"SEND\nfoo:first\nfoo:second\n\n\x00")
    assert parsed.headers == {"foo": "first"}


def test_header_escapes_are_decoded() -> None:
    (parsed,) = parse_all(b"SEND\na\\cb:1\\n2\\r3\\\\4\\c5\n\n\x00")
    assert parsed.headers == {"a:b": "1\n2\r3\\4:5"}


@pytest.mark.parametrize("raw", [b"x:a\\tb", b"x:ab\\", b"x\\s:1"])
def test_undefined_escapes_are_errors(raw: bytes) -> None:
    assert parse_error(b"SEND\n" + raw + b"\n\n\x00").message == "bad escape in header"


def test_connect_headers_are_not_unescaped() -> None:
    (parsed,) = parse_all(b"CONNECT\npasscode:a\\tb:c\n\n\x00")
    assert parsed.headers == {"passcode": "a\\tb:c"}


def test_header_values_keep_their_spaces_and_colons() -> None:
    (parsed,) = parse_all(b"SEND\nx: a:b \n\n\x00")
    assert parsed.headers == {"x": " a:b "}


@pytest.mark.parametrize("line", [b"novalue", b":empty-name", b"bad\rcr:1", b"x:\xff\xfe"])
def test_malformed_header_lines_are_errors(line: bytes) -> None:
    assert parse_error(b"SEND\n" + line + b"\n\n\x00").message == "malformed header"


@pytest.mark.parametrize("command", [b"PUBLISH", b"send", b"MESSAGE", b"\xff"])
def test_unknown_commands_are_errors(command: bytes) -> None:
    error = parse_error(command + b"\n\n\x00")
    shown = command.decode("utf-8", errors="replace")
    assert error.message == "Bad command"
    assert error.detail == f'Could not interpret command "{shown}"\n'  # RabbitMQ's words


def test_an_unknown_command_is_quoted_short_and_printable() -> None:
    error = parse_error(b"X\tY" + b"Z" * 100 + b"\n\n\x00")
    assert error.detail == 'Could not interpret command "X\\tY' + "Z" * 37 + '..."\n'


def test_an_eol_before_the_nul_of_a_frame_without_a_body_is_no_body() -> None:
    parser = FrameParser()
    parser.receive_data(b"CONNECT\nlogin:a\n\n\n\x00")
    assert parser.next_frame() == Frame("CONNECT", {"login": "a"}, b"")


def test_only_send_may_carry_a_body() -> None:
    error = parse_error(b"SUBSCRIBE\nid:1\nreceipt:r1\n\nbody\x00")
    assert error.message == "a SUBSCRIBE frame must not have a body"
    assert error.receipt == "r1"


def test_frame_larger_than_the_limit_is_an_error_before_it_is_buffered_whole() -> None:
    parser = FrameParser(max_frame_size=100)
    parser.receive_data(b"SEND\n\n" + b"x" * 200)  # no NUL yet: refused while arriving
    with pytest.raises(ProtocolError, match="frame too large"):
        parser.next_frame()


def test_content_length_over_the_limit_is_refused_at_once() -> None:
    parser = FrameParser(max_frame_size=100)
    parser.receive_data(b"SEND\ncontent-length:1000\n\n")
    with pytest.raises(ProtocolError, match="frame too large"):
        parser.next_frame()


def test_too_many_headers_is_an_error() -> None:
    data = b"SEND\n" + b"".join(b"h%d:v\n" % i for i in range(11)) + b"\n\x00"
    assert parse_error(data, max_headers=10).message == "too many headers"
    assert len(parse_all(data, max_headers=11)[0].headers) == 11


def test_too_many_headers_is_refused_while_they_arrive() -> None:
    parser = FrameParser(max_headers=10)
    parser.receive_data(b"SEND\n" + b"h:v\n" * 20)
    with pytest.raises(ProtocolError, match="too many headers"):
        parser.next_frame()


def test_too_long_header_line_is_an_error_complete_or_arriving() -> None:
    assert parse_error(b"SEND\nx:" + b"v" * 50 + b"\n\n\x00", max_header_length=40).message == (
        "header too long"
    )
    parser = FrameParser(max_header_length=40)
    parser.receive_data(b"SEND\nx:" + b"v" * 50)
    with pytest.raises(ProtocolError, match="header too long"):
        parser.next_frame()


def test_a_limit_broken_while_the_headers_arrive_names_the_receipt_already_read() -> None:
    parser = FrameParser(max_header_length=40)
    parser.receive_data(b"SEND\nreceipt:r1\nx:" + b"v" * 50)
    with pytest.raises(ProtocolError, match="header too long") as error:
        parser.next_frame()
    assert error.value.receipt == "r1"
    parser = FrameParser(max_headers=10)
    parser.receive_data(b"SEND\n" + b"h:v\n" * 5 + b"receipt:r2\n" + b"h:v\n" * 20)
    with pytest.raises(ProtocolError, match="too many headers") as error:
        parser.next_frame()
    assert error.value.receipt == "r2"


def test_a_bare_cr_between_frames_is_an_error() -> None:
    assert parse_error(b"\rSEND\n\n\x00").message == "malformed frame"


def test_the_parser_stays_broken_after_an_error() -> None:
    parser = FrameParser()
    parser.receive_data(b"BOGUS\n\n\x00SEND\n\n\x00")
    with pytest.raises(ProtocolError):
        parser.next_frame()
    with pytest.raises(ProtocolError):
        parser.next_frame()


def test_a_partial_frame_waits_for_more_bytes() -> None:
    parser = FrameParser()
    for chunk in (b"SE", b"ND\r", b"\nx:1\r\n", b"\r", b"\nab", b"c"):
        parser.receive_data(chunk)
        assert parser.next_frame() is None
    parser.receive_data(b"\x00")
    assert parser.next_frame() == Frame("SEND", {"x": "1"}, b"abc")


def test_escape_and_unescape_round_trip() -> None:
    text = "a:b\\c\nd\re"
    assert unescape(escape(text)) == text


def test_serialize_escapes_headers_and_adds_content_length() -> None:
    data = serialize(Frame("MESSAGE", {"a:b": "x\ny"}, b"\x00\x01"))
    assert data == b"MESSAGE\na\\cb:x\\ny\ncontent-length:2\n\n\x00\x01\x00"
    assert parse_all(data.replace(b"MESSAGE", b"SEND"))[0].body == b"\x00\x01"


def test_serialize_leaves_connected_headers_raw() -> None:
    assert serialize(Frame("CONNECTED", {"version": "1.2"})) == b"CONNECTED\nversion:1.2\n\n\x00"


def test_a_stream_split_at_every_point_gives_the_same_frames() -> None:
    data = (
        b"\r\nCONNECT\r\naccept-version:1.2\r\npasscode:a:b\r\n\r\n\x00\n"
        b"SEND\ndestination:/queue/a\ncontent-length:3\nx:\\c\\n\n\n\x00\x00\x00\x00\r\n\n"
        b"SEND\ndestination:/queue/a\n\nto the nul\x00"
        b"ACK\nid:1\n\n\x00"
    )
    whole = parse_all(data)
    assert [f.command for f in whole] == ["CONNECT", "SEND", "SEND", "ACK"]
    for cut in range(len(data) + 1):
        parser = FrameParser()
        frames = []
        for piece in (data[:cut], data[cut:]):
            parser.receive_data(piece)
            while (parsed := parser.next_frame()) is not None:
                frames.append(parsed)
        assert frames == whole, cut


def _serialized_one_by_one(command: str, headers: list[tuple[str, str]], body: bytes,
                           escaped: bool) -> bytes:  # fmt: skip
    """The serializer as first written: each name and value escaped on its own."""
    raw = command in ("CONNECT", "STOMP", "CONNECTED")
    lines = [command]
    for name, value in headers:
        if name == "content-length":
            continue
        if raw:
            lines.append(f"{name}:{value}")
        elif escaped:
            lines.append(f"{escape(name)}:{escape(value)}")
        else:
            lines.append(f"{name.replace(chr(13), ' ').replace(chr(10), ' ')}:"
                         f"{value.replace(chr(13), ' ').replace(chr(10), ' ')}")  # fmt: skip
    if body or command in ("SEND", "MESSAGE", "ERROR"):
        lines.append(f"content-length:{len(body)}")
    return "\n".join([*lines, "", ""]).encode() + body + b"\x00"


# \x00 and \x01 are the sentinels the serializer joins names and values with before it
# escapes them all at once: a header holding one must still come out as escaped alone
TRICKY = ["", "plain", "a:b", "a\nb", "a\rb", "a\\b", "\\", ":", "\r\n", "é:ü\n", "x\\c",
          "\x00", "\x01", "a\x01b:\x00c"]  # fmt: skip


@pytest.mark.parametrize("command", ["MESSAGE", "RECEIPT", "ERROR", "CONNECTED"])
@pytest.mark.parametrize("escaped", [True, False])
def test_serialize_escapes_exactly_the_names_and_values_needing_it(
    command: str, escaped: bool
) -> None:
    """The serializer looks at all the text at once for anything to escape: it must give
    what escaping each name and value alone gives, whichever one holds the character."""
    from xumpweb.stomp.frames import serialize_parts

    for tricky in TRICKY:
        for headers in (
            [("subscription", "1"), ("destination", tricky)],
            [(f"n{tricky}", "v"), ("mid", "m-1")],
            [("content-length", "99"), ("k", tricky), (tricky or "e", tricky)],
            [],
        ):
            for body in (b"", b"body"):
                expected = _serialized_one_by_one(command, headers, body, escaped)
                got = serialize_parts(command, headers, body, escaped=escaped)
                assert got == expected, (headers, body)
                assert serialize_parts(command, iter(headers), body, escaped=escaped) == got


def test_a_header_block_ending_in_crlf_after_lf_only_lines_is_found() -> None:
    """The end of the header block is an LF LF or an LF CR LF, whichever comes first."""
    (parsed,) = parse_all(b"SEND\ndestination:/queue/a\r\n\r\nx\n\ny\x00")
    assert parsed == Frame("SEND", {"destination": "/queue/a"}, b"x\n\ny")
    (parsed,) = parse_all(b"SEND\ndestination:/queue/a\n\r\nx\n\ny\x00")
    assert parsed == Frame("SEND", {"destination": "/queue/a"}, b"x\n\ny")


ESCAPE_PIECES = st.sampled_from(["\\", "\\\\", "\\c", "\\n", "\\r", "\\t", "c", "n", ":", "a", "é"])


@settings(max_examples=400, deadline=None)
@given(name=st.lists(ESCAPE_PIECES, min_size=1, max_size=6).map("".join),
       value=st.lists(ESCAPE_PIECES, max_size=8).map("".join))  # fmt: skip
def test_a_head_with_escapes_reads_the_same_with_lf_or_crlf_ends(name: str, value: str) -> None:
    """An LF-only head with escapes is read by the parser's fast path, a CRLF one line by
    line: the same headers, or the same error (an undefined escape, a colon in a name)."""

    def read(eol: bytes) -> Frame | str:
        head = b"ACK" + eol + f"{name}:{value}".encode() + eol + b"id:1" + eol + eol
        try:
            return parse_all(head + b"\x00")[0]
        except ProtocolError as error:
            return f"{error.message}: {error.detail}"

    assert read(b"\n") == read(b"\r\n")


def test_an_escaped_ack_id_is_read_back() -> None:
    """stomp.py escapes the colons of the ack ids it sends back."""
    frame = parse_all(b"ACK\nid:q\\c1\\c17\\c5\nx\\\\c:\\\\\\c\n\n\x00")[0]
    assert frame.headers == {"id": "q:1:17:5", "x\\c": "\\:"}
