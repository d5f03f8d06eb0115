"""Random and mutated byte streams, split at random points, fed to the STOMP core.

Properties: the frames (and the connection's actions) are the same whatever the split, and
no exception escapes: the parser raises only `ProtocolError`, the connection none at all.
"""

from __future__ import annotations

from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.stomp.conftest import delivery, frame
from xumpweb.stomp.connection import (
    Action,
    Authenticate,
    Send,
    StompConfig,
    StompConnection,
)
from xumpweb.stomp.frames import Frame, FrameParser, ProtocolError

# small limits, so that random streams reach them
LIMITS = {"max_frame_size": 400, "max_headers": 6, "max_header_length": 60}

FRAMES = [
    frame("CONNECT", accept_version="1.2", passcode="t:k", heart_beat="10,20"),
    frame("STOMP", accept_version="1.1,1.2", host="h"),
    frame("SEND", b"hello", destination="/queue/q", receipt="r1", x="a:b\\c"),
    frame("SEND", b"a\x00b", destination="/queue/q", content_type="text/plain"),
    b"SEND\r\ndestination:/queue/q\r\n\r\nno length\x00\r\n\n",
    frame("SUBSCRIBE", id="s1", destination="/queue/w", ack="client"),
    frame("SUBSCRIBE", id="s2", destination="/topic/a.*", ack="client-individual"),
    frame("ACK", id="2"),
    frame("ACK", id="4", receipt="a4"),
    frame("NACK", id="5", receipt="n"),
    frame("ACK", id="3", transaction="t"),
    frame("BEGIN", transaction="t"),
    frame("COMMIT", transaction="t", receipt="c"),
    frame("ABORT", transaction="t"),
    frame("UNSUBSCRIBE", id="s1"),
    frame("DISCONNECT", receipt="bye"),
    b"\n\n",
]


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    data = bytearray(b"".join(draw(st.lists(st.sampled_from(FRAMES), min_size=1, max_size=8))))
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        change = draw(st.sampled_from(["insert", "delete", "flip", "nul", "eol"]))
        if change == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=80))
        elif change == "delete":
            del data[at : at + draw(st.integers(1, 20))]
        elif change == "flip":
            data[at] = draw(st.integers(0, 255))
        elif change == "nul":
            data[at] = 0
        else:
            data[at:at] = b"\r\n"
    return bytes(data)


def any_stream() -> st.SearchStrategy[bytes]:
    return st.one_of(streams(), st.binary(max_size=300))


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in pairwise(points)]


def parse(pieces: list[bytes]) -> tuple[list[Frame], bool]:
    """The frames parsed from `pieces` fed one by one, and whether an error ended them."""
    parser = FrameParser(**LIMITS)
    frames: list[Frame] = []
    try:
        for piece in pieces:
            parser.receive_data(piece)
            while (parsed := parser.next_frame()) is not None:
                frames.append(parsed)
    except ProtocolError:
        return frames, True
    return frames, False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=any_stream(), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_frames_are_parsed_the_same_whatever_the_split(data: bytes, cuts: list[int]) -> None:
    whole = parse([data])
    assert parse(chunks(data, cuts)) == whole
    assert parse([bytes([b]) for b in data]) == whole


def run(pieces: list[bytes], *, prepared: bool) -> list[object]:
    """Everything the connection asks for, accepting every login. `prepared`: the stream
    arrives on a connection already past CONNECT, with subscriptions s0 (client) and s9
    (client-individual) holding unsettled MESSAGEs with ack ids 1-3 and 4-5. ERROR frames
    count as one kind: which limit a half-arrived frame hits first may depend on the cut."""
    conn = StompConnection(StompConfig(**LIMITS))
    if prepared:
        conn.receive_data(frame("CONNECT", accept_version="1.2"))
        conn.accept()
        conn.receive_data(frame("SUBSCRIBE", id="s0", destination="/queue/w", ack="client"))
        conn.receive_data(
            frame("SUBSCRIBE", id="s9", destination="/queue/w", ack="client-individual")
        )
        for sid, tags in (("s0", "abc"), ("s9", "de")):
            for tag in tags:
                conn.deliver(sid, delivery(tag))
    log: list[object] = []

    def record(actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send) and action.data.startswith(b"ERROR"):
                log.append("ERROR")
                continue
            log.append(action)
            if isinstance(action, Authenticate):
                record(conn.accept(principal="p", session="s"))

    for piece in pieces:
        record(conn.receive_data(piece))
    log.append(conn.unsettled())
    return log


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=any_stream(),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
    prepared=st.booleans(),
)
def test_the_connection_acts_the_same_whatever_the_split(
    data: bytes, cuts: list[int], prepared: bool
) -> None:
    whole = run([data], prepared=prepared)
    assert run(chunks(data, cuts), prepared=prepared) == whole
