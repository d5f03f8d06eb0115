"""A STOMP subscriber while Redis is away (xumpweb/stompgate/session.py, "Redis away"), over
TCP and over WebSocket, with heart-beats both ways checked by the client (stomp.py drops a
connection whose server falls silent) and by the server.

* Redis killed and kept away: the subscriber gets an ERROR naming Redis and the connection
  closes, within the session's bound (STORE_AWAY; the silence the server measured, as its
  ERROR says, against it plus a generous allowance). Before, the session went on for good
  and said nothing (90 s watched). Once Redis is back, what the subscriber had not
  acknowledged comes to a new connection; what it had acknowledged never comes back.
* Redis killed and started again at once (well within the bound): the session goes on,
  and every message a RECEIPT confirmed arrives once: those that waited for its window
  across the restart, and those sent after it.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.web.conftest import Service, eventually, service_with_own_redis, unique
from tests.web.stomp_clients import TRANSPORTS, Client, stomp_connection

HEARTBEAT_MS = 2000  # the server's heart-beat interval here (XUMP_STOMP_HEARTBEAT_MS)
# seconds the server's measure of Redis's silence may pass its bound by on a loaded machine
# (the store watch looks every quarter of a second): an allowance, not a wait
ALLOWANCE = 10.0
WITHIN = 120.0  # seconds an awaited event may take: a deadline, not a margin


class HeartbeatClient(Client):
    """A Client that notes when stomp.py gave up on the server's heart-beats."""

    heartbeat_timeouts = 0

    def on_heartbeat_timeout(self) -> None:
        with self.changed:
            self.heartbeat_timeouts += 1
            self.changed.notify_all()


@pytest.fixture
def blip(tmp_path):
    """The service on a redis-server of its own, heart-beating every HEARTBEAT_MS."""
    yield from service_with_own_redis(tmp_path, XUMP_STOMP_HEARTBEAT_MS=str(HEARTBEAT_MS))


@pytest.fixture
def away(tmp_path):
    """The same with a short delivery timeout: what a session ended by Redis's absence held
    unacknowledged comes back soon after Redis does."""
    yield from service_with_own_redis(
        tmp_path, XUMP_STOMP_HEARTBEAT_MS=str(HEARTBEAT_MS), XUMP_DELIVERY_TIMEOUT="10"
    )


def _client(service: Service, port: int | None, over: str, quiet: bool = False):
    """A connected client heart-beating both ways (stomp.py drops the connection when the
    server is silent for 2.5 intervals); None when `quiet` and it cannot connect."""
    connection = stomp_connection(service, port or 0, over, heartbeats=(HEARTBEAT_MS,) * 2,
                                  heart_beat_receive_scale=2.5)  # fmt: skip
    client = HeartbeatClient(connection)
    try:
        connection.connect("tests", service.admin_token, wait=True)
    except Exception:
        if quiet:
            return None
        raise
    return None if client.errors else client


def _port(service: Service, over: str) -> int | None:
    """The STOMP TCP server's port for a test over TCP (over WebSocket the web process
    serves STOMP)."""
    return service.start_stomp() if over == "tcp" else None


def _store_away(service: Service) -> float:
    """The session's bound, as the code has it (store_watch.STORE_AWAY)."""
    printed = service.shell("from xumpweb.live.store_watch import STORE_AWAY\nprint(STORE_AWAY)")
    return float(printed.splitlines()[-1])


def _confirmed(service: Service, queue: str) -> int:
    with service.client() as http:
        answer = http.get(f"/api/queues/{quote(queue, safe='')}/stats")
    return answer.json().get("confirmed", -1) if answer.status_code == 200 else -1


def _bodies(frames) -> list[str]:
    return [frame.body for frame in frames]


@pytest.mark.parametrize("over", TRANSPORTS)
def test_a_subscriber_gets_an_error_naming_redis_when_redis_stays_away(away, over) -> None:
    service, redis_server = away
    limit = _store_away(service)
    port = _port(service, over)
    queue = unique("away")
    subscriber = _client(service, port, over)
    subscriber.subscribe(f"/queue/{queue}")  # makes the mailbox
    producer = _client(service, port, over)
    for n in range(4):
        producer.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}")
    producer.receipt("r3")
    producer.disconnect()
    taken = subscriber.take(4)
    assert _bodies(taken) == ["m0", "m1", "m2", "m3"]
    for frame in taken[:2]:  # acknowledged for good; m2 and m3 are held unacknowledged
        subscriber.ack(frame, receipt=f"ack-{frame.body}")

    redis_server.kill()
    subscriber.wait(lambda: bool(subscriber.errors) or subscriber.disconnected,
                    "an ERROR frame or the end of the connection", WITHIN)  # fmt: skip
    assert subscriber.heartbeat_timeouts == 0, "the server's heart-beats stopped"
    (error,) = subscriber.errors
    assert error.headers["message"] == "store unavailable", error.headers
    assert "Redis" in error.body, error.body
    subscriber.wait(lambda: subscriber.disconnected, "the end of the connection", WITHIN)
    # within the bound, on the server's clock: how long Redis had not answered when it ended
    silent = float(re.search(r"has not answered for ([0-9.]+) s", error.body)[1])
    assert limit <= silent <= limit + ALLOWANCE, (silent, limit)

    # nothing a RECEIPT confirmed is lost: what it held unacknowledged comes to another
    # connection once Redis is back (at the delivery timeout), what it acknowledged never
    redis_server.start()  # the same port and AOF
    again = eventually(lambda: _client(service, port, over, quiet=True),
                       "a STOMP connection after the restart", within=WITHIN)  # fmt: skip
    again.subscribe(f"/queue/{queue}")
    back = again.take(2, within=WITHIN)
    assert sorted(_bodies(back)) == ["m2", "m3"]
    assert all(frame.headers["redelivered"] == "true" for frame in back)
    for frame in back:
        again.ack(frame, receipt=f"ack-again-{frame.body}")
    eventually(lambda: _confirmed(service, queue) == 4, "four confirmed", within=WITHIN)
    assert sorted(_bodies(again.messages)) == ["m2", "m3"]
    again.disconnect()
    if over == "tcp":  # the STOMP server said what happened once, and no stray errors
        said = (Path(service.env["XUMP_TEST_DIR"]) / "stomp.log").read_text(errors="replace")
        assert "never retrieved" not in said, said[-3000:]
        assert said.count(f"cannot note the presence of {queue!r}") <= 1, said[-3000:]


@pytest.mark.parametrize("over", TRANSPORTS)
def test_a_subscriber_rides_out_a_redis_restart_within_the_bound(blip, over) -> None:
    service, redis_server = blip
    port = _port(service, over)
    held, open_ = unique("held"), unique("open")
    subscriber = _client(service, port, over)
    # one at a time: a0 held unacknowledged across the restart, a1..a3 waiting behind it
    subscriber.subscribe(f"/queue/{held}", sid="held", **{"prefetch-count": "1"})
    # an open window: its take waits on Redis when Redis is killed
    subscriber.subscribe(f"/queue/{open_}", sid="open")
    producer = _client(service, port, over)
    for n in range(4):
        producer.send(f"/queue/{held}", f"a{n}", receipt=f"a{n}")
    producer.send(f"/queue/{open_}", "b0", receipt="b0")
    producer.receipt("a3")
    producer.receipt("b0")
    producer.disconnect()
    subscriber.take(2)
    first = next(frame for frame in subscriber.messages if frame.body == "a0")

    redis_server.kill()
    redis_server.start()  # the same port and AOF: every receipted SEND is there
    subscriber.ack(first)  # sent again until Redis answers, if it does not yet
    for n in range(1, 4):  # the rest of held, one at a time, each once its window opens
        subscriber.wait(lambda n=n: f"a{n}" in _bodies(subscriber.messages), f"a{n}", WITHIN)
        subscriber.ack(next(f for f in subscriber.messages if f.body == f"a{n}"))
    # and what is sent after the restart, on the subscription whose take met the kill
    after = eventually(lambda: _client(service, port, over, quiet=True),
                       "a STOMP connection after the restart", within=WITHIN)  # fmt: skip
    after.send(f"/queue/{open_}", "b1", receipt="b1")
    after.receipt("b1")
    after.disconnect()
    subscriber.wait(lambda: "b1" in _bodies(subscriber.messages), "b1", WITHIN)
    for frame in subscriber.messages:
        if frame.body.startswith("b"):
            subscriber.ack(frame)
    eventually(lambda: _confirmed(service, held) == 4, "held's four confirmed", within=WITHIN)
    eventually(lambda: _confirmed(service, open_) == 2, "open's two confirmed", within=WITHIN)

    assert sorted(_bodies(subscriber.messages)) == ["a0", "a1", "a2", "a3", "b0", "b1"]
    assert all(frame.headers["redelivered"] == "false" for frame in subscriber.messages)
    assert not subscriber.errors and not subscriber.disconnected
    assert subscriber.heartbeat_timeouts == 0
    subscriber.disconnect()


@pytest.mark.parametrize("over", TRANSPORTS)
def test_a_subscribe_to_a_new_queue_while_redis_is_away_is_refused_not_receipted(
    blip, over
) -> None:
    """A SUBSCRIBE's RECEIPT means the subscription is in place: to a /queue/ whose mailbox
    cannot be made (Redis away) it is an ERROR `store unavailable`, not a RECEIPT for a
    subscription nothing would ever deliver to (before: RECEIPT, the failure only logged,
    and the connection never asked for the mailbox again). Once Redis is back, the same
    SUBSCRIBE makes the mailbox and what is sent there comes."""
    service, redis_server = blip
    port = _port(service, over)
    queue = unique("later")
    subscriber = _client(service, port, over)
    redis_server.kill()
    subscriber.connection.subscribe(f"/queue/{queue}", "1", ack="auto",
                                    headers={"receipt": "sub"})  # fmt: skip
    subscriber.wait(lambda: bool(subscriber.errors) or "sub" in subscriber.receipts,
                    "an ERROR or the SUBSCRIBE's RECEIPT", WITHIN)  # fmt: skip
    assert "sub" not in subscriber.receipts
    (error,) = subscriber.errors
    assert error.headers["message"] == "store unavailable", (error.headers, error.body)

    redis_server.start()
    again = eventually(lambda: _client(service, port, over, quiet=True),
                       "a STOMP connection after the restart", within=WITHIN)  # fmt: skip
    again.subscribe(f"/queue/{queue}", ack="auto")
    again.send(f"/queue/{queue}", "hello", receipt="sent")
    again.receipt("sent")
    assert _bodies(again.take(1)) == ["hello"]
    again.disconnect()
