"""/ws/subscribe/<destination>/ against the running server (inline routing): the credit
window, batched frames, acks and rejects, redelivery after a disconnect, bad frames,
authentication, origins, heartbeats, and the subscriber example of docs/websocket.md.

The helpers here (`Xump`, `subscribe`) are shared with test_monitor.py and
test_end_to_end.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import httpx
import pytest
import redis
from celery import Celery
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from engine import Message
from engine.relay import RelayClient, delivery_from_json
from tests.web.conftest import ROOT, unique, wait_for
from xumpweb.live.frames import delivery_frame
from xumpweb.router.codec import delivery_out

__all__ = ["wait_for"]  # shared with the modules that import their helpers from here


# -- helpers ----------------------------------------------------------------------------------
class Xump:
    """The service from outside: wiring and publishing through the HTTP API where it serves
    them, else with the relay commands the API itself sends (and the web process's kick)."""

    def __init__(self, service) -> None:
        self.service = service
        self.store = service.env["XUMP_STORE"]
        self.relay = RelayClient(service.env["XUMP_REDIS_URL"], self.store)
        self.http = service.client()
        self.worker = service.env["XUMP_ROUTING"] == "worker"
        self.celery = Celery(broker=service.env["XUMP_REDIS_URL"]) if self.worker else None
        self._api: bool | None = None

    def close(self) -> None:
        self.relay.close()
        self.http.close()
        if self.celery is not None:
            self.celery.close()

    def api(self) -> bool:
        """Whether the server's HTTP API has the batch publish endpoint yet."""
        if self._api is None:
            answer = self.http.get("/api/openapi.json")
            paths = answer.json().get("paths", {}) if answer.status_code == 200 else {}
            self._api = "/api/queues/{queue}/publish-batch" in paths
        return self._api

    def kick(self) -> None:
        """Make sure a router reads the inbox, as runtime.Service.kick does."""
        if self.celery is not None and self.relay.client.set(
            f"xump:{{{self.store}}}:kicked", "1", nx=True, ex=30
        ):
            self.celery.send_task("xumpweb.router.tasks.route", args=[self.store])

    def call(self, method: str, **arguments):
        self.kick()
        return self.relay.call(method, timeout=30, **arguments)

    def pattern(self, kind: str, name: str, router: str, topic: str = "", credit: int = 1):
        return self.call(
            "pattern_build", kind=kind, name=name, router=router, topic=topic, credit=credit
        )

    def deliver(self, queue: str, destination: str, **settings) -> None:
        """A queue whose every message goes to `destination`."""
        self.call("queue_create", name=queue, **settings)
        self.call("selector_create", queue=queue, when="always", action="deliver",
                  target=destination, enabled=True)  # fmt: skip

    def publish(self, queue: str, messages: list, chunk: int = 1000) -> list[str]:
        """Publish in batches of `chunk`; the mids. A message is a body (text) or a dict
        with "body" and "address"."""
        mids: list[str] = []
        for start in range(0, len(messages), chunk):
            part = [
                m if isinstance(m, dict) else {"body": m} for m in messages[start : start + chunk]
            ]
            if self.api():
                answer = self.http.post(
                    f"/api/queues/{quote(queue, safe='')}/publish-batch", json={"messages": part}
                )
                assert answer.status_code in (200, 201, 202), answer.text
                mids.extend(answer.json()["mids"])
            else:
                mids.extend(self.relay.publish_many(queue, [
                    Message(address=m.get("address", ""), body=m["body"].encode()) for m in part
                ]))  # fmt: skip
                self.kick()
        return mids

    def stats(self, queue: str) -> dict:
        return self.call("stats", queue=queue)

    def waiting(self, queue: str) -> list[dict]:
        """A queue's unprocessed messages (e.g. a dead-letter queue's content)."""
        if self.api():
            answer = self.http.get(f"/api/queues/{quote(queue, safe='')}/waiting")
            assert answer.status_code == 200, answer.text
            found = answer.json()
            return found["messages"] if isinstance(found, dict) else found
        return self.call("peek", queue=queue, count=1000)


@pytest.fixture
def xump(service):
    found = Xump(service)
    yield found
    found.close()


@contextmanager
def subscribe(service, destination: str, token: str | None = None, query: str = "",
              **options) -> Iterator[ClientConnection]:  # fmt: skip
    """A WebSocket subscriber, authenticated by the query string (the admin token unless
    told), already told it is subscribed; closed on leaving the block."""
    token = token or service.admin_token
    url = f"{service.ws_url}/ws/subscribe/{quote(destination, safe='')}/?token={token}{query}"
    with connect(url, open_timeout=10, **options) as socket:
        assert receive(socket)["type"] == "subscribed"
        yield socket


def receive(socket: ClientConnection, timeout: float = 10.0) -> dict:
    return json.loads(socket.recv(timeout=timeout))


def send(socket: ClientConnection, frame: dict) -> None:
    socket.send(json.dumps(frame))


def take(socket: ClientConnection, count: int, within: float = 20.0) -> list[dict]:
    """`count` deliveries (from single or batched frames), skipping heartbeats."""
    found: list[dict] = []
    deadline = time.monotonic() + within
    while len(found) < count:
        frame = receive(socket, timeout=max(0.1, deadline - time.monotonic()))
        if frame["type"] == "delivery":
            found.append(frame)
        elif frame["type"] == "deliveries":
            found.extend(frame["items"])
        elif frame["type"] != "heartbeat":
            raise AssertionError(f"unexpected frame {frame}")
    return found


def next_frame(socket: ClientConnection, kind: str, within: float = 10.0) -> dict:
    """The next frame of type `kind`, skipping any other (heartbeats, monitor frames)."""
    deadline = time.monotonic() + within
    while True:
        frame = receive(socket, timeout=max(0.1, deadline - time.monotonic()))
        if frame["type"] == kind:
            return frame


def silent(socket: ClientConnection, seconds: float) -> bool:
    """Whether nothing but heartbeats arrives for `seconds`."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            frame = receive(socket, timeout=left)
        except TimeoutError:
            return True
        if frame["type"] != "heartbeat":
            return False
    return True


def bodies(deliveries: list[dict]) -> list[str]:
    return [d["message"]["body"] for d in deliveries]


def issue_token(service, rights: dict) -> str:
    printed = service.shell(
        "from xumpweb.wiring.models import ApiToken\n"
        f"print(ApiToken.issue('ws-test', {rights!r})[1])"
    )
    return printed.splitlines()[-1]


def session_cookie(service) -> str:
    """The Cookie header of the admin's login session (as a browser would hold it)."""
    with httpx.Client(base_url=service.url, follow_redirects=True) as browser:
        form = browser.get("/admin/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        browser.post("/admin/login/?next=/admin/", data={
            "username": "admin", "password": "admin-password", "csrfmiddlewaretoken": csrf,
        })  # fmt: skip
        return f"sessionid={browser.cookies['sessionid']}"


def as_console(service, url: str, cookie: str | None = None) -> ClientConnection:
    """A WebSocket to `url` opened as the console's pages open one: from the console's
    origin, with a login session's Cookie header (the admin's unless `cookie` is given)."""
    cookie = cookie or session_cookie(service)
    return connect(url, origin=service.url, additional_headers={"Cookie": cookie})


# -- the credit window ------------------------------------------------------------------------
def test_it_sends_no_more_deliveries_than_the_credit_granted(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(service, destination) as socket:
        xump.publish(queue, [f"m{n}" for n in range(5)])
        assert silent(socket, 0.5)  # no credit, no sends
        send(socket, {"type": "credit", "n": 3})
        assert bodies(take(socket, 3)) == ["m0", "m1", "m2"]
        assert silent(socket, 0.5)
        send(socket, {"type": "credit", "n": 10})
        assert bodies(take(socket, 2)) == ["m3", "m4"]


def test_acks_do_not_restore_credit(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 2})
        xump.publish(queue, ["a", "b", "c"])
        first = take(socket, 2)
        send(socket, {"type": "ack", "tags": [d["tag"] for d in first]})
        assert silent(socket, 0.5)
        send(socket, {"type": "credit", "n": 1})
        assert bodies(take(socket, 1)) == ["c"]


def test_a_delivery_frame_carries_the_message(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 1})
        [mid] = xump.publish(queue, ["hello"])
        [delivery] = take(socket, 1)
    assert delivery["type"] == "delivery" and delivery["queue"] == queue
    assert delivery["destination"] == destination and delivery["redelivered"] is False
    assert delivery["delivery_count"] == 1 and isinstance(delivery["tag"], str)
    message = delivery["message"]
    assert message["mid"] == mid and message["body"] == "hello"
    assert message["encoding"] == "text" and message["seq"] == 1


def test_batched_credit_sends_deliveries_frames_of_at_most_the_batch(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    xump.publish(queue, [f"m{n}" for n in range(10)])
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 10, "batch": 4})
        frames, found = [], []
        while len(found) < 10:
            frame = receive(socket)
            assert frame["type"] == "deliveries"
            frames.append(frame)
            found.extend(frame["items"])
        assert all(1 <= len(frame["items"]) <= 4 for frame in frames)
        assert bodies(found) == [f"m{n}" for n in range(10)]


def test_acks_confirm_the_deliveries_in_the_engine(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination, history=100)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 100, "batch": 50})
        xump.publish(queue, [f"m{n}" for n in range(20)])
        found = take(socket, 20)
        send(socket, {"type": "ack", "tag": found[0]["tag"]})
        send(socket, {"type": "ack", "tags": [d["tag"] for d in found[1:]]})
        stats = wait_for(lambda: (s := xump.stats(queue))["confirmed"] == 20 and s)
    assert stats and stats["outstanding"] == 0 and stats["history_size"] == 20


def test_subscribers_of_one_destination_share_its_deliveries(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(service, destination) as one, subscribe(service, destination) as two:
        send(one, {"type": "credit", "n": 5})
        send(two, {"type": "credit", "n": 5})
        xump.publish(queue, [f"m{n}" for n in range(10)])
        found = take(one, 5) + take(two, 5)
    assert sorted(bodies(found)) == sorted(f"m{n}" for n in range(10))


# -- settling: reject, disconnect -------------------------------------------------------------
def test_a_disconnect_returns_unacked_deliveries_redelivered_in_order(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 15})
        mids = xump.publish(queue, [f"m{n}" for n in range(15)])
        first = take(socket, 15)
        send(socket, {"type": "ack", "tags": [d["tag"] for d in first[:5]]})
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 100})
        again = take(socket, 10)
        assert silent(socket, 0.5)
    assert [d["message"]["mid"] for d in again] == mids[5:]
    assert all(d["redelivered"] and d["delivery_count"] == 2 for d in again)
    assert {d["tag"] for d in again}.isdisjoint(d["tag"] for d in first)


def test_deliveries_taken_but_not_yet_sent_are_returned_too(service, xump):
    """A subscriber that vanishes while its pump holds deliveries loses none of them."""
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    xump.publish(queue, [f"m{n}" for n in range(500)])
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 500})
    # closed at once: most deliveries were still being sent
    with subscribe(service, destination) as again:
        send(again, {"type": "credit", "n": 1000, "batch": 100})
        found = take(again, 500)
        assert silent(again, 0.5)
    assert sorted(bodies(found)) == sorted(f"m{n}" for n in range(500))


def test_reject_without_requeue_dead_letters_and_with_requeue_redelivers(service, xump):
    queue, destination, dead = unique(), unique("d"), unique("dlq")
    xump.call("queue_create", name=dead)
    xump.deliver(queue, destination, dead_letter=dead)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 2})
        xump.publish(queue, ["bad", "again"])
        bad, again = take(socket, 2)
        send(socket, {"type": "reject", "tag": bad["tag"], "requeue": False})
        send(socket, {"type": "reject", "tag": again["tag"]})  # requeue is the default
        send(socket, {"type": "credit", "n": 1})
        [redelivered] = take(socket, 1)
    assert redelivered["message"]["body"] == "again" and redelivered["redelivered"]
    [letter] = wait_for(lambda: xump.waiting(dead))
    assert letter["body"] == "bad" and letter["headers"]["x-reason"] == "rejected"
    assert letter["headers"]["x-original-queue"] == queue


def test_a_delivery_no_frame_can_carry_is_dead_lettered_with_its_reason_and_the_rest_flow(
    service, xump
):
    """Issue 12: a NaN header (data older than the publish checks) killed the subscriber's
    pump with no error frame, and what it had taken waited for the delivery timeout. The
    pump now rejects such a delivery to the dead letters, saying why, and goes on."""
    queue, destination, dead = unique(), unique("d"), unique("dlq")
    xump.call("queue_create", name=dead)
    xump.deliver(queue, destination, dead_letter=dead)
    outbox = redis.Redis.from_url(service.env["XUMP_REDIS_URL"])
    key = f"xump:{{{xump.store}}}:outbox:{destination}"
    xump.publish(queue, ["poisoned"])
    assert wait_for(lambda: outbox.llen(key) == 1)
    item = json.loads(outbox.lindex(key, 0))  # as an older router could have written it
    item["message"]["headers"] = {"x": float("nan"), "y": "ok"}
    outbox.lset(key, 0, json.dumps(item))
    xump.publish(queue, ["after"])
    assert wait_for(lambda: outbox.llen(key) == 2)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 10})
        [after] = take(socket, 1)
        assert after["message"]["body"] == "after"
        send(socket, {"type": "ack", "tag": after["tag"]})
        assert silent(socket, 0.3)
    [letter] = wait_for(lambda: xump.waiting(dead))
    assert letter["body"] == "poisoned" and letter["headers"]["x-reason"] == "rejected"
    assert "header 'x' is not a finite number" in letter["headers"]["x-detail"]
    assert wait_for(lambda: xump.stats(queue)["confirmed"] == 1)


# -- bad frames -------------------------------------------------------------------------------
BAD_FRAMES = [
    ("not json", "bad_json"),
    ("[1, 2]", "bad_frame"),
    ('{"n": 5}', "bad_frame"),
    ('{"type": 7}', "bad_frame"),
    ('{"type": "subscribe"}', "unknown_type"),
    ('{"type": "credit", "n": "5"}', "invalid_argument"),
    ('{"type": "credit", "n": -1}', "invalid_argument"),
    ('{"type": "credit", "n": true}', "invalid_argument"),
    ('{"type": "credit", "n": 1.5}', "invalid_argument"),
    ('{"type": "credit", "n": 100001}', "invalid_argument"),
    ('{"type": "credit", "n": 1, "batch": 5000}', "invalid_argument"),
    ('{"type": "ack"}', "invalid_argument"),
    ('{"type": "ack", "tag": 12}', "invalid_argument"),
    ('{"type": "ack", "tags": "t1"}', "invalid_argument"),
    ('{"type": "ack", "tags": [1, 2]}', "invalid_argument"),
    ('{"type": "ack", "tag": "no-such-tag"}', "unknown_tag"),
    ('{"type": "reject"}', "invalid_argument"),
    ('{"type": "reject", "tag": "no-such-tag"}', "unknown_tag"),
    ('{"type": "reject", "tag": "x", "requeue": "no"}', "invalid_argument"),
    ('{"type": "auth", "token": "xump_a_b"}', "already_authenticated"),
    # hostile values (issue 12): what JSON cannot carry plainly (NaN, infinities, numbers
    # past a double, lone surrogates, 100,000 levels) is not JSON here: refused as such
    ('{"type": "credit", "n": NaN}', "bad_json"),
    ('{"type": "credit", "n": Infinity}', "bad_json"),
    ('{"type": "credit", "n": 1e999}', "bad_json"),
    ('{"type": "credit", "n": 1' + "0" * 5000 + "}", "bad_json"),
    ('{"type": "ack", "tag": "\\ud800"}', "bad_json"),
    ('{"type": "ack", "tags": ["\\udfff", "t"]}', "bad_json"),
    ('{"type": "reject", "tag": "\\ud800x", "requeue": false}', "bad_json"),
    ('{"type": "\\ud800"}', "bad_json"),
    ("[" * 100_000 + "]" * 100_000, "bad_json"),
    ('{"type": "ack", "tags": [' + ",".join(['"t"'] * 10_001) + "]}", "invalid_argument"),
]


def test_bad_frames_get_error_frames_and_the_connection_stays_open(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with subscribe(service, destination) as socket:
        socket.send(b"\x00binary")
        assert receive(socket)["error"] == "bad_frame"
        for text, code in BAD_FRAMES:
            socket.send(text)
            answer = receive(socket)
            assert answer["type"] == "error" and answer["error"] == code, (text, answer)
            assert answer["detail"]
        send(socket, {"type": "heartbeat"})  # tolerated, not answered
        send(socket, {"type": "credit", "n": 1})
        xump.publish(queue, ["still works"])
        [delivery] = take(socket, 1)
        assert delivery["message"]["body"] == "still works"
        send(socket, {"type": "ack", "tag": delivery["tag"]})
        send(socket, {"type": "ack", "tag": delivery["tag"]})  # twice: already settled
        assert receive(socket)["error"] == "unknown_tag"
    assert wait_for(lambda: xump.stats(queue)["confirmed"] == 1)


# -- who may subscribe --------------------------------------------------------------------------
def test_a_token_in_the_first_frame_authenticates(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with connect(f"{service.ws_url}/ws/subscribe/{destination}/") as socket:
        send(socket, {"type": "credit", "n": 1})
        assert receive(socket)["error"] == "not_authenticated"
        send(socket, {"type": "auth", "token": service.admin_token})
        assert receive(socket) == {"type": "subscribed", "destination": destination}
        send(socket, {"type": "credit", "n": 1})
        xump.publish(queue, ["hi"])
        assert bodies(take(socket, 1)) == ["hi"]


def closing(socket: ClientConnection) -> tuple[dict, int | None]:
    """The error frame before the server closes, and the close code."""
    frame = receive(socket)
    with pytest.raises(ConnectionClosed):
        socket.recv(timeout=5)
    return frame, socket.close_code


def test_it_refuses_unknown_tokens_and_tokens_without_the_consume_right(service, xump):
    destination = unique("orders")
    with connect(f"{service.ws_url}/ws/subscribe/{destination}/?token=xump_nope_nope") as s:
        frame, code = closing(s)
    assert frame["error"] == "unauthorized" and code == 4401
    publisher = issue_token(service, {"*": ["publish", "manage"]})
    with connect(f"{service.ws_url}/ws/subscribe/{destination}/") as socket:
        send(socket, {"type": "auth", "token": publisher})
        frame, code = closing(socket)
    assert frame["error"] == "forbidden" and code == 4403
    consumer = issue_token(service, {"orders-*": ["consume"]})
    with subscribe(service, destination, token=consumer):
        pass
    with connect(f"{service.ws_url}/ws/subscribe/other/?token={consumer}") as socket:
        frame, code = closing(socket)
    assert frame["error"] == "forbidden" and code == 4403


def test_destination_names_may_hold_colons_and_slashes(service, xump):
    destination = f"{unique('svc')}:worker/1"
    queue = unique()
    xump.deliver(queue, destination)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 1})
        xump.publish(queue, ["x"])
        assert take(socket, 1)[0]["destination"] == destination
    with connect(f"{service.ws_url}/ws/subscribe/%24dead/?token={service.admin_token}") as s:
        frame, code = closing(s)
    assert frame["error"] == "invalid_argument" and code == 4400


def test_browsers_from_foreign_origins_are_refused(service):
    url = f"{service.ws_url}/ws/subscribe/{unique('d')}/?token={service.admin_token}"
    with pytest.raises(InvalidStatus) as refused:
        connect(url, origin="http://evil.example")
    assert refused.value.response.status_code == 403
    with connect(url, origin=service.url) as socket:  # the console's own pages
        assert receive(socket)["type"] == "subscribed"


def test_the_console_session_authenticates(service):
    with as_console(service, f"{service.ws_url}/ws/subscribe/{unique('d')}/") as socket:
        assert receive(socket)["type"] == "subscribed"


def test_it_sends_heartbeats_in_silence_and_tolerates_the_clients(service):
    with subscribe(service, unique("d"), query="&heartbeat=1") as socket:
        send(socket, {"type": "heartbeat"})
        started = time.monotonic()
        assert receive(socket, timeout=5) == {"type": "heartbeat"}
        assert 0.5 < time.monotonic() - started < 3


# -- the documented example ---------------------------------------------------------------------
def test_the_documented_subscriber_example_runs(service, xump, tmp_path):
    text = (ROOT / "docs" / "websocket.md").read_text()
    [example] = re.findall(r"```python\n(# subscriber\.py.*?)```", text, re.S)
    assert len(example.strip().splitlines()) <= 16
    script = tmp_path / "subscriber.py"
    script.write_text(example)
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination, history=10)
    env = {**service.env, "XUMP_WS": service.ws_url, "XUMP_TOKEN": service.admin_token,
           "XUMP_DESTINATION": destination}  # fmt: skip
    process = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                               text=True)  # fmt: skip
    try:
        time.sleep(1.0)
        xump.publish(queue, ["one", "two", "three"])
        lines = [process.stdout.readline().strip() for _ in range(3)]
        assert wait_for(lambda: xump.stats(queue)["confirmed"] == 3)
    finally:
        process.kill()
        process.wait()
    assert [line.split()[-1] for line in lines] == ["one", "two", "three"]


def test_delivery_frames_have_the_api_s_delivery_shape(service, xump):
    """The subscriber's fast path gives what codec.delivery_out gives for the same item."""
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    bodies = [b"text \xc3\xa9", b"\xff\x00binary", b""]
    headers = {"n": 1, "ok": True, "x": 1.5, "s": "\u00e9"}
    xump.relay.publish_many(queue, [Message("a.b", headers, body, "reply") for body in bodies])
    xump.kick()
    key = f"xump:{{{xump.store}}}:outbox:{destination}"
    raws = wait_for(lambda: len(found := xump.relay.client.lrange(key, 0, -1)) == 3 and found)
    assert raws
    for raw in raws:
        assert delivery_frame(raw) == delivery_out(delivery_from_json(raw))
    encodings = [delivery_frame(raw)["message"]["encoding"] for raw in raws]
    assert encodings == ["text", "base64", "text"]


def test_the_outbox_is_one_redis_list_per_destination(service, xump):
    """Deliveries wait in the destination's outbox until a subscriber has credit."""
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    xump.publish(queue, ["waits"])
    client = redis.Redis.from_url(service.env["XUMP_REDIS_URL"])
    key = f"xump:{{{xump.store}}}:outbox:{destination}"
    assert wait_for(lambda: client.llen(key) == 1)
    with subscribe(service, destination) as socket:
        send(socket, {"type": "credit", "n": 1})
        assert bodies(take(socket, 1)) == ["waits"]
        # taken off the outbox (checked while connected: closing without an ack requeues
        # it, and the router may put it back in the outbox at once)
        assert client.llen(key) == 0
    client.close()


def test_websocket_frames_are_not_compressed_though_the_client_offers_it(service, xump):
    """The server (as the Procfile runs it) declines permessage-deflate, which the
    client offers: deflating every small delivery cost CPU for nothing."""
    destination = unique("d")
    with subscribe(service, destination) as socket:
        assert "permessage-deflate" in socket.request.headers["Sec-WebSocket-Extensions"]
        assert "Sec-WebSocket-Extensions" not in socket.response.headers
