"""A /ws/subscribe/ subscriber while Redis is away (xumpweb/live/consumers.py, "Redis away";
docs/websocket.md, "When Redis goes away"), as the STOMP side does it
(test_stomp_redis_away.py):

* Redis killed and kept away: the subscriber is told once (one `store_unavailable` error
  frame), not once a second for as long as the outage lasts; past the bound (STORE_AWAY, as
  STOMP's) a second error frame says the connection ends, and it closes with 4503. Once
  Redis is back, what it had not acked comes to a new connection; what it acked never.
* Redis killed and started again at once: the connection stays; a subscriber whose read
  met the outage is told once that the store is unavailable and once that it is back, and
  every message arrives once, none redelivered.

The events are waited for with generous deadlines; the frames are counted, never timed.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection

from tests.web.conftest import eventually, service_with_own_redis, unique
from tests.web.test_subscribe import Xump, bodies, send, subscribe, take

WITHIN = 120.0  # seconds an awaited event may take: a deadline, not a margin
CLOSE_STORE_AWAY = 4503  # docs/websocket.md, "Closing codes"


@pytest.fixture
def away(tmp_path):
    """The service on a redis-server of its own, with a short delivery timeout: what a
    connection ended by Redis's absence held unacked comes back soon after Redis does."""
    yield from service_with_own_redis(tmp_path, XUMP_DELIVERY_TIMEOUT="10")


@pytest.fixture
def xump(away):
    service, _ = away
    found = Xump(service)
    yield found
    found.close()


def _notices(frames: list[dict]) -> list[str]:
    """What the server said about the store, in order: the `store_unavailable` error frames
    and the `store_available` frames."""
    said = []
    for frame in frames:
        if frame["type"] == "error" and frame["error"] == "store_unavailable":
            said.append("unavailable")
        elif frame["type"] == "store_available":
            said.append("available")
    return said


def _frames_until_closed(socket: ClientConnection, flood: int = 3) -> list[dict]:
    """Every frame but heartbeats until the server closes the connection, or until it has
    said `flood` times that the store is unavailable (it should say so once, and once more
    as it closes: more is the flood this file is about)."""
    frames: list[dict] = []
    while _notices(frames).count("unavailable") < flood:
        try:
            frame = json.loads(socket.recv(timeout=WITHIN))
        except ConnectionClosed:
            break
        if frame["type"] != "heartbeat":
            frames.append(frame)
    return frames


def _frames_until(socket: ClientConnection, body: str) -> list[dict]:
    """Every frame but heartbeats up to the delivery of `body` (deliveries flattened)."""
    frames: list[dict] = []
    while body not in bodies([f for f in frames if f["type"] == "delivery"]):
        frame = json.loads(socket.recv(timeout=WITHIN))
        if frame["type"] == "deliveries":
            frames.extend(frame["items"])
        elif frame["type"] != "heartbeat":
            frames.append(frame)
    return frames


def _published(xump: Xump, queue: str, body: str) -> bool:
    """Whether the HTTP API took the publish (it answers 503 until Redis is back)."""
    answer = xump.http.post(f"/api/queues/{quote(queue, safe='')}/publish", json={"body": body})
    return answer.status_code == 202


def _stats(xump: Xump, queue: str) -> dict:
    answer = xump.http.get(f"/api/queues/{quote(queue, safe='')}/stats")
    return answer.json() if answer.status_code == 200 else {}


def test_a_subscriber_is_told_once_and_closed_when_redis_stays_away(away, xump) -> None:
    service, redis_server = away
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 100})  # the window stays open: it reads on
        xump.publish(queue, ["m0", "m1", "m2", "m3"])
        taken = take(socket, 4)
        assert bodies(taken) == ["m0", "m1", "m2", "m3"]
        send(socket, {"type": "ack", "tags": [d["tag"] for d in taken[:2]]})  # m2, m3 held
        eventually(lambda: _stats(xump, queue).get("confirmed") == 2, "two confirmed")

        redis_server.kill()
        frames = _frames_until_closed(socket)
        assert _notices(frames) == ["unavailable", "unavailable"], frames
        first, last = frames[0], frames[-1]
        assert first["type"] == "error" and "Redis" in first["detail"], first
        assert last["type"] == "error" and "Redis" in last["detail"], last
        assert "closes" in last["detail"], last
        assert socket.close_code == CLOSE_STORE_AWAY, (socket.close_code, socket.close_reason)
    # and its log said it once too, with the end
    said = (Path(service.env["XUMP_TEST_DIR"]) / "server.log").read_text(errors="replace")
    assert said.count("cannot read outbox") == 1, said[-3000:]
    assert said.count("the connection ends") == 1, said[-3000:]

    # nothing is lost: what it held unacked comes to another connection once Redis is back
    # (at the delivery timeout), what it acked never
    redis_server.start()  # the same port and AOF
    eventually(lambda: _published(xump, queue, "m4"), "a publish after the restart", WITHIN)
    with subscribe(service, destination) as again:
        send(again, {"type": "credit", "n": 100})
        back = take(again, 3, within=WITHIN)
        assert sorted(bodies(back)) == ["m2", "m3", "m4"]
        assert {d["message"]["body"] for d in back if d["redelivered"]} == {"m2", "m3"}
        send(again, {"type": "ack", "tags": [d["tag"] for d in back]})
        eventually(lambda: _stats(xump, queue).get("confirmed") == 5, "five confirmed", WITHIN)
        stats = _stats(xump, queue)
        assert stats["outstanding"] == 0 and stats["depth"] == 0, stats


def test_a_subscriber_rides_out_a_redis_restart_told_once_each_way(away, xump) -> None:
    service, redis_server = away
    held_queue, held = unique(), unique("held")
    open_queue, open_ = unique(), unique("open")
    xump.deliver(held_queue, held)
    xump.deliver(open_queue, open_)
    with subscribe(service, held) as one, subscribe(service, open_) as other:
        # one at a time: a0 held unacked across the restart, a1..a3 waiting behind it
        send(one, {"type": "credit", "n": 1})
        # an open window: its read waits on Redis when Redis is killed
        send(other, {"type": "credit", "n": 100})
        xump.publish(held_queue, ["a0", "a1", "a2", "a3"])
        xump.publish(open_queue, ["b0"])
        (a0,) = take(one, 1)
        (b0,) = take(other, 1)

        redis_server.kill()
        redis_server.start()  # the same port and AOF: every accepted publish is there
        send(one, {"type": "ack", "tag": a0["tag"]})  # sent again until Redis answers
        seen_one = [a0]
        for n in range(1, 4):  # the rest of held, one at a time, each once its window opens
            send(one, {"type": "credit", "n": 1})
            seen_one += _frames_until(one, f"a{n}")
            send(one, {"type": "ack", "tag": seen_one[-1]["tag"]})
        eventually(lambda: _published(xump, open_queue, "b1"), "b1 published", WITHIN)
        seen_other = [b0, *_frames_until(other, "b1")]
        send(other, {"type": "ack", "tags": [f["tag"] for f in seen_other if "tag" in f]})
        for queue, count in ((held_queue, 4), (open_queue, 2)):
            eventually(lambda q=queue, c=count: _stats(xump, q).get("confirmed") == c,
                       f"{count} confirmed on {queue}", WITHIN)  # fmt: skip

    # the read that met the kill: told once it failed, once it worked again, before b1
    assert _notices(seen_other) == ["unavailable", "available"], seen_other
    # the held one read nothing while its window was shut: told nothing, or both, once
    assert _notices(seen_one) in ([], ["unavailable", "available"]), seen_one
    delivered_one = [f for f in seen_one if f["type"] == "delivery"]
    delivered_other = [f for f in seen_other if f["type"] == "delivery"]
    assert bodies(delivered_one) == ["a0", "a1", "a2", "a3"]
    assert bodies(delivered_other) == ["b0", "b1"]
    assert not any(f["redelivered"] for f in delivered_one + delivered_other)
    said = ("delivery", "error", "store_available")
    others = [f for f in seen_one + seen_other if f["type"] not in said]
    assert others == [], others
