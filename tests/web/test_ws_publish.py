"""/ws/publish/ against the running server (inline routing): publish frames and their
answers, pipelining, the HTTP API's checks and error codes, rights, full queues."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.web.conftest import ROOT, trace_lines, unique
from tests.web.test_subscribe import bodies, issue_token, receive, send, subscribe, take, xump

__all__ = ["xump"]  # the fixture


@contextmanager
def publisher(service, token: str | None = None) -> Iterator[ClientConnection]:
    """A publishing connection, authenticated by the query string (the admin token unless
    told), already told it is ready."""
    url = f"{service.ws_url}/ws/publish/?token={token or service.admin_token}"
    with connect(url, open_timeout=10, max_size=None) as socket:
        assert receive(socket) == {"type": "ready"}
        yield socket


def answer(socket: ClientConnection) -> dict:
    """The next answer, heartbeats skipped."""
    while True:
        frame = receive(socket, timeout=20)
        if frame["type"] != "heartbeat":
            return frame


def test_it_publishes_one_message_and_answers_with_its_mid(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with publisher(service) as socket, subscribe(service, destination) as sub:
        send(sub, {"type": "credit", "n": 10})
        send(socket, {"type": "publish", "queue": queue, "id": "c1", "message": {
            "body": "hello", "address": "a.b", "headers": {"n": 7, "ok": True},
            "return_address": "back"}})  # fmt: skip
        published = answer(socket)
        assert published["type"] == "published" and published["id"] == "c1"
        [mid] = published["mids"]
        [delivery] = take(sub, 1)
    message = delivery["message"]
    assert message["mid"] == mid and message["body"] == "hello"
    assert message["address"] == "a.b" and message["headers"] == {"n": 7, "ok": True}
    assert message["return_address"] == "back"


def test_a_batch_frame_publishes_in_order_and_json_and_base64_bodies_work(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with publisher(service) as socket, subscribe(service, destination) as sub:
        send(sub, {"type": "credit", "n": 10})
        send(socket, {"type": "publish", "queue": queue, "id": 7, "messages": [
            {"body": "one"}, {"json": {"a": [1, 2]}}, {"body_base64": "dHdv"}]})  # fmt: skip
        published = answer(socket)
        assert published["id"] == 7 and len(published.get("mids", [])) == 3, published
        found = take(sub, 3)
    assert bodies(found) == ["one", '{"a":[1,2]}', "two"]
    assert [d["message"]["mid"] for d in found] == published["mids"]


def test_a_thousand_pipelined_frames_are_all_confirmed_and_delivered_in_order(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    total = 1000
    with publisher(service) as socket, subscribe(service, destination) as sub:
        send(sub, {"type": "credit", "n": total, "batch": 100})
        for n in range(total):  # all sent before any answer is read
            send(socket, {"type": "publish", "queue": queue, "id": n, "message": {"body": f"m{n}"}})
        answers = [answer(socket) for _ in range(total)]
        found = take(sub, total, within=60)
    assert [a["id"] for a in answers] == list(range(total))  # in the order of the frames
    assert all(a["type"] == "published" and len(a["mids"]) == 1 for a in answers)
    assert len({a["mids"][0] for a in answers}) == total
    assert bodies(found) == [f"m{n}" for n in range(total)]
    assert [d["message"]["mid"] for d in found] == [a["mids"][0] for a in answers]


# -- what the HTTP API refuses, refused the same ----------------------------------------------
HOSTILE = [
    ('"message": {"body": "p", "headers": {"x": NaN}}', "invalid_argument", "finite"),
    ('"message": {"body": "p", "headers": {"x": Infinity}}', "invalid_argument", "finite"),
    ('"message": {"headers": {"x": 1234567890123456789012345}}', "invalid_argument", "64 bits"),
    ('"message": {"body": "p", "address": "a\\udfff"}', "invalid_argument", "surrogate"),
    ('"message": {"body": "\\ud800"}', "invalid_argument", "Unicode"),
    ('"message": {"body": "p", "headers": {"\\udfffx": 1}}', "invalid_argument", "header name"),
    ('"message": {"json": [1, NaN]}', "invalid_argument", "NaN"),
    ('"message": {"headers": {"a\\nb": 1}}', "invalid_argument", "whitespace"),
    ('"message": {"body": "x", "json": 1}', "invalid_argument", "one of"),
    ('"message": {"body": 5}', "invalid_argument", "string"),
    ('"message": {"colour": "red"}', "invalid_argument", "unknown field"),
    ('"message": {"body_base64": "***"}', "invalid_argument", "base64"),
    ('"messages": []', "invalid_argument", "empty"),
    ('"messages": [{"body": "ok"}, {"headers": {"x": NaN}}]', "invalid_argument", "messages[1]"),
    ('"message": {"body": "a"}, "messages": [{"body": "b"}]', "invalid_argument", "not both"),
    ('"messages": "x"', "invalid_argument", "list"),
]


def test_hostile_values_get_error_frames_with_their_id_and_the_connection_survives(service, xump):
    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with publisher(service) as socket, subscribe(service, destination) as sub:
        send(sub, {"type": "credit", "n": 10})
        for n, (fields, code, words) in enumerate(HOSTILE):
            socket.send(f'{{"type": "publish", "queue": "{queue}", "id": "h{n}", {fields}}}')
            error = answer(socket)
            assert error["type"] == "error" and error["id"] == f"h{n}", (fields, error)
            assert error["error"] == code and words in error["detail"], (fields, error)
            assert "\\ud" not in json.dumps(error).lower()
        deep = '{"type": "publish", "queue": "q", "message": {"json": ' + "[" * 3000
        socket.send(deep + "]" * 3000 + "}}")
        assert answer(socket)["error"] == "bad_json"
        socket.send('{"type": "publish", "queue": 5, "id": "q", "message": {}}')
        assert answer(socket)["error"] == "invalid_argument"
        socket.send('{"type": "publish", "queue": "x", "id": "\\ud800", "message": {}}')
        assert answer(socket)["error"] == "invalid_argument"
        socket.send(json.dumps({"type": "publish", "queue": unique(), "id": "gone",
                                "message": {"body": "x"}}))  # fmt: skip
        missing = answer(socket)
        assert (missing["id"], missing["error"]) == ("gone", "not_found")
        send(socket, {"type": "publish", "queue": queue, "id": "ok", "message": {"body": "fine"}})
        assert answer(socket)["type"] == "published"
        assert bodies(take(sub, 1)) == ["fine"]  # only the good one reached the queue
    assert xump.stats(queue)["published"] == 1


def test_too_large_a_body_is_message_too_large(service, xump):
    queue = unique()
    xump.call("queue_create", name=queue)
    with publisher(service) as socket:
        send(socket, {"type": "publish", "queue": queue, "id": 1,
                      "message": {"body": "x" * (8 * 1024 * 1024 + 1)}})  # fmt: skip
        error = answer(socket)
    assert (error["id"], error["error"]) == (1, "message_too_large")


# -- who may publish ---------------------------------------------------------------------------
def test_a_token_publishes_only_where_it_has_the_publish_right(service, xump):
    allowed, other = unique("jobs"), unique("orders")
    for queue in (allowed, other):
        xump.call("queue_create", name=queue)
    token = issue_token(service, {"jobs-*": ["publish"]})
    with publisher(service, token) as socket:
        send(socket, {"type": "publish", "queue": other, "id": 1, "message": {"body": "x"}})
        refused = answer(socket)
        send(socket, {"type": "publish", "queue": allowed, "id": 2, "message": {"body": "x"}})
        assert answer(socket)["type"] == "published"
    assert (refused["id"], refused["error"]) == (1, "forbidden")
    assert xump.stats(other)["published"] == 0


def test_a_token_without_any_publish_right_is_refused_at_the_door(service):
    consumer = issue_token(service, {"*": ["consume", "manage"]})
    with connect(f"{service.ws_url}/ws/publish/?token={consumer}") as socket:
        frame = receive(socket)
        with pytest.raises(ConnectionClosed):
            socket.recv(timeout=5)
    assert frame["error"] == "forbidden" and socket.close_code == 4403
    with connect(f"{service.ws_url}/ws/publish/?token=xump_nope_nope") as socket:
        assert receive(socket)["error"] == "unauthorized"


def test_a_token_in_the_first_frame_authenticates(service, xump):
    queue = unique()
    xump.call("queue_create", name=queue)
    with connect(f"{service.ws_url}/ws/publish/") as socket:
        send(socket, {"type": "publish", "queue": queue, "message": {"body": "x"}})
        assert answer(socket)["error"] == "not_authenticated"
        send(socket, {"type": "auth", "token": service.admin_token})
        assert answer(socket) == {"type": "ready"}
        send(socket, {"type": "publish", "queue": queue, "message": {"body": "x"}})
        assert answer(socket)["type"] == "published"


# -- full queues and the inbox -----------------------------------------------------------------
def test_a_queue_that_drops_when_full_answers_queue_full_and_publishes_nothing_more(service, xump):
    queue = unique()
    xump.call("queue_create", name=queue, limit=2)
    with publisher(service) as socket:
        for n in range(4):
            send(socket, {"type": "publish", "queue": queue, "id": n,
                          "message": {"body": f"m{n}"}})  # fmt: skip
        answers = [answer(socket) for _ in range(4)]
        send(socket, {"type": "publish", "queue": queue, "id": "b",
                      "messages": [{"body": "x"}, {"body": "y"}]})  # fmt: skip
        batch = answer(socket)
    assert [a["type"] for a in answers] == ["published", "published", "error", "error"]
    assert {a["error"] for a in answers[2:]} == {"queue_full"}
    assert batch["error"] == "queue_full"  # all or nothing, as HTTP's batch
    assert xump.stats(queue)["depth"] == 2


def test_a_queue_with_a_dead_letter_queue_takes_publishes_past_its_limit(service, xump):
    queue, dead = unique(), unique("dead")
    xump.call("queue_create", name=dead)
    xump.call("queue_create", name=queue, limit=1, dead_letter=dead)
    with publisher(service) as socket:
        for n in range(3):
            send(socket, {"type": "publish", "queue": queue, "id": n, "message": {"body": "m"}})
        assert [answer(socket)["type"] for _ in range(3)] == ["published"] * 3


@pytest.fixture(scope="module")
def stoppable(redis_server, tmp_path_factory):
    """Worker routing whose worker the tests stop and start; an inbox of 3 commands, and
    a call timeout longer than redis-py's default socket timeout (5 s)."""
    from tests.web.conftest import start_service

    running = start_service(redis_server.url, tmp_path_factory.mktemp("stoppable"), "worker",
                            XUMP_INBOX_LIMIT="3", XUMP_CALL_TIMEOUT="40")  # fmt: skip
    running.start_worker()
    yield running
    running.close()


def test_a_router_answer_slower_than_five_seconds_still_confirms(stoppable):
    """A publish to a queue that drops when full waits for the router's answer: with no
    router for 6 s, the answer comes when one starts (it once failed at redis-py's 5 s
    socket timeout with store_unavailable)."""
    with stoppable.client() as client:
        made = client.post("/api/queues", json={"name": "slow", "limit": 5})
        assert made.status_code == 201, made.text
    stoppable.stop("worker")
    with publisher(stoppable) as socket:
        send(socket, {"type": "publish", "queue": "slow", "id": 1, "message": {"body": "m"}})
        with pytest.raises(TimeoutError):
            socket.recv(timeout=6)  # no router: no answer yet
        stoppable.start_worker()
        assert answer(socket)["type"] == "published"


def test_a_full_inbox_refuses_publishes_with_inbox_full(stoppable):
    with stoppable.client() as client:
        assert client.post("/api/queues", json={"name": "full"}).status_code == 201
    stoppable.stop("worker")  # nothing drains the inbox now
    with publisher(stoppable) as socket:
        found = []
        for n in range(6):
            send(socket, {"type": "publish", "queue": "full", "id": n, "message": {"body": "m"}})
            found.append(answer(socket))
    stoppable.start_worker()
    kinds = [a["type"] if a["type"] == "published" else a["error"] for a in found]
    assert kinds == ["published"] * 3 + ["inbox_full"] * 3, kinds
    assert found[-1]["retry_after"] == 1


def test_the_documented_publisher_example_runs(service, xump, tmp_path):
    queue = unique()
    xump.call("queue_create", name=queue)
    text = (ROOT / "docs" / "websocket.md").read_text()
    code = re.search(r"```python\n(# publisher\.py.*?)```", text, re.DOTALL).group(1)
    (tmp_path / "publisher.py").write_text(code)
    lines = "".join(f"line {n}\n" for n in range(250))
    env = {**os.environ, "XUMP_WS": service.ws_url, "XUMP_TOKEN": service.admin_token,
           "XUMP_QUEUE": queue}  # fmt: skip
    ran = subprocess.run([sys.executable, str(tmp_path / "publisher.py")], input=lines,
                         env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0 and not ran.stderr, ran.stderr
    assert xump.stats(queue)["published"] == 250
    assert [m["body"] for m in xump.waiting(queue)][:3] == ["line 0", "line 1", "line 2"]


def test_frames_arriving_while_an_append_is_on_its_way_go_in_one_append(service, xump):
    """Group commit: Redis holds writes for a second (CLIENT PAUSE WRITE; it lets them go
    by itself) while a first publish's append waits; the 99 frames read meanwhile (a few
    ms of work) go out in ONE more append (Redis counts the PUBLISHes: each append rings
    the router's doorbell once, in its own round trip), and every frame still gets its own
    confirm, in order."""
    queue = unique()
    xump.call("queue_create", name=queue)
    store = redis.Redis.from_url(service.env["XUMP_REDIS_URL"])
    with publisher(service) as socket:
        send(socket, {"type": "publish", "queue": queue, "id": -1, "message": {"body": "warm"}})
        assert answer(socket)["type"] == "published"  # the wiring read, the script cached
        before = store.info("commandstats")["cmdstat_publish"]["calls"]
        store.execute_command("CLIENT", "PAUSE", 1000, "WRITE")
        for n in range(100):
            send(socket, {"type": "publish", "queue": queue, "id": n, "message": {"body": "m"}})
        answers = [answer(socket) for _ in range(100)]
    appends = store.info("commandstats")["cmdstat_publish"]["calls"] - before
    store.close()
    assert [a["id"] for a in answers] == list(range(100))
    assert all(a["type"] == "published" for a in answers)
    assert appends == 2, appends  # the first frame's, then the 99 others' together


def test_a_revoked_token_closes_its_publishing_connection(service, xump):
    queue = unique()
    xump.call("queue_create", name=queue)
    with service.client() as admin:
        made = admin.post("/api/tokens", json={"name": unique("pub"),
                                               "rights": {queue: ["publish"]}}).json()  # fmt: skip
        with publisher(service, made["secret"]) as socket:
            send(socket, {"type": "publish", "queue": queue, "message": {"body": "x"}})
            assert answer(socket)["type"] == "published"
            assert admin.delete(f"/api/tokens/{made['token']['id']}").status_code == 200
            frame = answer(socket)
            with pytest.raises(ConnectionClosed):
                socket.recv(timeout=10)
    assert frame["error"] == "unauthorized" and socket.close_code == 4401


def test_a_publish_frame_carries_ttl_delay_and_priority(service, xump):
    """Message lifetime (SPEC §8) over the WebSocket publish: the HTTP API's fields, the
    same checks (a bad one publishes nothing)."""
    queue = unique()
    with service.client() as client:
        assert client.post("/api/queues", json={"name": queue, "priorities": 10}).status_code == 201
        with publisher(service) as socket:
            send(socket, {"type": "publish", "queue": queue, "id": "bad", "messages": [
                {"body": "fine"}, {"body": "no", "ttl": -1}]})  # fmt: skip
            refused = answer(socket)
            assert refused["type"] == "error" and "messages[1]" in refused["detail"], refused
            send(socket, {"type": "publish", "queue": queue, "id": "ok", "messages": [
                {"body": "later", "delay": 3600, "ttl": 7200}, {"body": "urgent", "priority": 9},
                {"body": "plain"}]})  # fmt: skip
            [later, urgent, plain] = answer(socket)["mids"]
        [waiting] = client.get(f"/api/queues/{queue}/scheduled").json()["messages"]
        assert (waiting["mid"], waiting["delay"], waiting["ttl"]) == (later, 3600.0, 7200.0)
        shown = client.get(f"/api/queues/{queue}/waiting").json()["messages"]
    assert [m["mid"] for m in shown] == [urgent, plain]
    assert shown[0]["headers"] == {"priority": 9}


# -- the bench's trace (engine/relay/trace.py) -------------------------------------------------
def test_a_traced_publish_frame_gathers_each_hops_stamp_and_an_untraced_one_none(service, xump):
    """bench/service_bench.py's hop table over the JSON WebSocket: a message published with
    `xump-trace` is delivered with the web process's recv= and learn= stamps in order in
    that header, and the store's trace channel says when its inbox append and routing step
    came back and when its delivery frame was written; one without it has neither."""
    from engine.relay.trace import TRACE, parse_header

    queue, destination = unique(), unique("d")
    xump.deliver(queue, destination)
    with trace_lines(service) as read_lines:
        with publisher(service) as socket, subscribe(service, destination) as sub:
            send(sub, {"type": "credit", "n": 10})
            sent = time.time()
            send(socket, {"type": "publish", "queue": queue, "message": {"body": "plain"}})
            send(socket, {"type": "publish", "queue": queue,
                          "message": {"body": "traced", "headers": {TRACE: "on"}}})  # fmt: skip
            assert [answer(socket)["type"] for _ in range(2)] == ["published"] * 2
            plain, traced = take(sub, 2)
        lines = read_lines(traced["message"]["mid"])
    assert plain["message"]["body"] == "plain" and TRACE not in plain["message"]["headers"]
    assert traced["message"]["body"] == "traced"
    stamps = parse_header(traced["message"]["headers"][TRACE])
    assert set(lines) == {"inbox", "step", "write"}, lines
    # as on STOMP (test_stomp_protocol): the router and the subscriber's reader learn of a
    # write in its own Redis turn, so they may note their times before its writer does
    assert sent <= stamps["recv"] <= lines["inbox"]
    assert stamps["recv"] <= lines["step"]
    # the append's answer and the delivery reach the same process on two connections: on
    # a busy event loop it may take up the delivery first, so learn follows recv, not
    # the inbox stamp
    assert stamps["recv"] <= stamps["learn"] <= lines["write"] <= time.time()
