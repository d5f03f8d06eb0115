"""Poison: every kind of hostile value, through every door that publishes, while good
messages flow to a real WebSocket subscriber (issue 12).

The doors: the HTTP API's single and batch publish on the fast path (xumpweb/api/direct.py,
Bearer token with a Content-Length) and the single publish through Django (a chunked
request, which the fast path hands on), and the JSON WebSocket's publish frames
(/ws/publish/, one message and a batch; every tenth good message goes through it too,
interleaved). STOMP is not part of this suite. Behind the
doors, hostile commands are also written straight into the router's inbox (as a broken or
hostile writer with Redis access could), to check that the router sets them aside and goes
on.

What must hold: every good message is delivered exactly once, in order; every bad one is
refused at the door with a 4xx JSON error whose reason does not repeat the bytes, or set
aside by the router with its reason; the router never stalls: the publish-to-delivery
latency of the good messages is measured while the poison flows and printed.
"""

from __future__ import annotations

import base64
import json
import re
import statistics
import time
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import redis
from websockets.sync.client import connect

from tests.faults.conftest import MAX_BODY
from tests.figures import report
from tests.web.conftest import unique
from tests.web.test_end_to_end import start_workers

GOOD = 2000
EVERY = 10  # a hostile request after every EVERY good publishes (each kind twice)
RAW_EVERY = 250  # a hostile command straight into the inbox after every RAW_EVERY
# The latency is printed, not held to 100 ms: on a shared machine the scheduler alone makes
# outliers of that size. A stalled router (the old failure) delivers nothing at all, which
# the exactly-once check catches; this bound only catches one that stalls for seconds.
LATENCY_LIMIT = 5.0


def _deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def hostile_messages() -> list[tuple[str, bytes]]:
    """(what, one message as raw JSON) for every kind of value no later stage can carry."""
    return [
        ("lone surrogate in the address", b'{"body": "p", "address": "a\\udfff"}'),
        ("lone surrogate in a header name", b'{"body": "p", "headers": {"\\udfffx": 1}}'),
        ("lone surrogate in a header value", b'{"body": "p", "headers": {"x": "a\\ud800"}}'),
        ("lone surrogate in the return address", b'{"body": "p", "return_address": "\\udfff"}'),
        ("lone surrogate in a text body", b'{"body": "\\udfff"}'),
        ("NaN header", b'{"body": "p", "headers": {"x": NaN}}'),
        ("Infinity header", b'{"body": "p", "headers": {"x": Infinity}}'),
        ("-Infinity header", b'{"body": "p", "headers": {"x": -Infinity}}'),
        ("1e999 header", b'{"body": "p", "headers": {"x": 1e999}}'),
        ("integer beyond 64 bits", b'{"headers": {"x": 123456789012345678901234567890}}'),
        ("NaN in a json body", b'{"json": [1, NaN]}'),
        ("JSON nested 3,000 deep", b'{"json": ' + _deep(3000) + b"}"),
        ("JSON nested 100,000 deep", b'{"json": ' + _deep(100_000) + b"}"),
        ("a header nested 3,000 deep", b'{"headers": {"x": ' + _deep(3000) + b"}}"),
        ("control character in a header name", b'{"headers": {"a\\u0000b": 1}}'),
        ("newline in a header name", b'{"headers": {"a\\nb": 1}}'),
        ("body of the limit + 1", json.dumps({"body": "x" * (MAX_BODY + 1)}).encode()),
        ("10,000 headers", json.dumps({"headers": {f"h{n}": n for n in range(10_000)}}).encode()),
        ("invalid UTF-8 in the request", b'{"body": "\xff\xfe"}'),
    ]


def hostile_requests(queue: str) -> list[tuple[str, str, str, bytes]]:
    """(what, door, path, raw body) for every hostile message through every door."""
    one = f"/api/queues/{quote(queue, safe='')}/publish"
    batch = f"/api/queues/{quote(queue, safe='')}/publish-batch"
    out = []
    for what, raw in hostile_messages():
        out.append((what, "fast single", one, raw))
        out.append((what, "fast batch", batch, b'{"messages": [{"body": "ok"}, ' + raw + b"]}"))
        out.append((what, "django single", one, raw))
        out.append((what, "websocket single", queue, b'"message": ' + raw))
        out.append((what, "websocket batch", queue, b'"messages": [{"body": "ok"}, ' + raw + b"]"))
    bad_queue = "/api/queues/" + quote("q\x00\x07", safe="") + "/publish"
    out.append(("control characters in the queue name", "fast single", bad_queue, b"{}"))
    return out


def raw_commands(queue: str) -> list[tuple[str, bytes]]:
    """(mid, command) hostile publishes written straight into the inbox, past the doors."""

    def publish(mid: str, **fields) -> bytes:
        message = {"address": "a", "headers": {}, "body": base64.b64encode(b"raw").decode(),
                   "return_address": None, "mid": mid, **fields}  # fmt: skip
        return json.dumps({"op": "publish", "queue": queue, "messages": [message]}).encode()

    return [
        ("raw-surrogate", publish("raw-surrogate", address="a\udfff")),
        ("raw-nan", publish("raw-nan", headers={"x": float("nan")})),
        # a leading space: read with json, as the relay client writes big integers (orjson
        # would read it as a float)
        ("raw-big", b" " + publish("raw-big", headers={"x": 2**70})),
        ("raw-unreadable", b'{"op": "publish", "queue": '),
        # a queue name the engine cannot even look up (a list): not a refusal but a failure
        # inside the step, which is rolled back and retried in parts
        (
            "raw-unhashable",
            publish("raw-unhashable")
            .replace(b'"queue": ', b'"queue": [', 1)
            .replace(b'", "messages"', b'"], "messages"', 1),
        ),
    ]


class WebSocketPublisher:
    """A /ws/publish/ connection that sends one frame and waits for its answer."""

    def __init__(self, service) -> None:
        url = f"{service.ws_url}/ws/publish/?token={service.admin_token}"
        self.socket = connect(url, open_timeout=10, max_size=None).__enter__()
        assert json.loads(self.socket.recv(timeout=10))["type"] == "ready"

    def publish(self, queue: str, fields: bytes) -> tuple[dict, str]:
        """Send a publish frame with `fields` (raw JSON); its answer, and the answer's text."""
        frame = b'{"type": "publish", "queue": "' + queue.encode() + b'", "id": 1, ' + fields + b"}"
        try:
            self.socket.send(frame.decode())
        except UnicodeDecodeError:  # not text: only a binary frame carries it
            self.socket.send(frame)
        while True:
            text = self.socket.recv(timeout=30)
            answer = json.loads(text)
            if answer["type"] != "heartbeat":
                return answer, text


def _chunked(raw: bytes) -> Iterator[bytes]:
    yield raw  # a body without Content-Length: the fast path hands it to Django


def test_poison_through_every_door_never_stalls_the_router_or_loses_a_good_message(
    poison_service,
) -> None:
    service = poison_service
    queue, destination = unique("poison"), unique("sink")
    inbox = f"xump:{{{service.env['XUMP_STORE']}}}:inbox"
    store = redis.Redis.from_url(service.env["XUMP_REDIS_URL"])
    hostile = hostile_requests(queue)
    raw = raw_commands(queue)
    assert len(hostile) <= GOOD // EVERY and len(raw) <= GOOD // RAW_EVERY  # each one is sent
    with service.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
        made = client.post(
            f"/api/queues/{queue}/selectors",
            json={"when": "always", "action": "deliver", "target": destination, "enabled": True},
        )
        assert made.status_code == 201, made.text  # fmt: skip
        # a window wide enough for every good message: none waits for credit
        [subscriber] = start_workers(service, [destination], credit=GOOD + 1000, batch=100)
        sent_at: dict[str, float] = {}
        answers: list[tuple[str, str, httpx.Response]] = []
        frames: list[tuple[str, str, dict, str]] = []
        ws = WebSocketPublisher(service)
        started = time.monotonic()
        for n in range(GOOD):
            body = f"g{n}"
            sent_at[body] = time.monotonic()
            if n % 10 == 5:  # a good one through the WebSocket, confirmed before the next
                confirm, _ = ws.publish(queue, b'"message": ' + json.dumps({"body": body}).encode())
                assert confirm["type"] == "published", confirm
            else:
                answer = client.post(f"/api/queues/{queue}/publish", json={"body": body})
                assert answer.status_code == 202, answer.text
            if n % EVERY == EVERY - 1:
                what, door, path, content = hostile[(n // EVERY) % len(hostile)]
                if door.startswith("websocket"):
                    frames.append((what, door, *ws.publish(path, content)))
                    continue
                headers = {"Content-Type": "application/json"}
                sent = _chunked(content) if door == "django single" else content
                answers.append((what, door, client.post(path, content=sent, headers=headers)))
            if n % RAW_EVERY == RAW_EVERY // 2:  # past the doors, into the router's inbox
                store.rpush(inbox, raw[(n // RAW_EVERY) % len(raw)][1])
        published = time.monotonic() - started
        deadline = time.monotonic() + 30
        while len(subscriber.received) < GOOD and time.monotonic() < deadline:
            time.sleep(0.05)
        subscriber.stop()
        ws.socket.close()
        stats = client.get(f"/api/queues/{queue}/stats").json()
        refused = client.get("/api/refused", params={"count": 1000}).json()["refused"]

    # every good message exactly once, in order
    order = [delivery["message"]["body"] for delivery in subscriber.received]
    assert order == [f"g{n}" for n in range(GOOD)]
    assert (stats["published"], stats["delivered"], stats["dead_lettered"]) == (GOOD, GOOD, 0)
    # every bad one refused at the door, with a JSON reason that does not echo it
    assert len(answers) + len(frames) == GOOD // EVERY and frames
    for what, door, answer in answers:
        assert answer.status_code in (400, 404, 413), (what, door, answer.status_code)
        error = answer.json()
        assert error["error"] and error["detail"], (what, door)
        assert "\\ud" not in answer.text.lower() and "\\u0000" not in answer.text, (what, door)
    for what, door, frame, text in frames:  # the WebSocket's error frames, the same codes
        assert frame["type"] == "error", (what, door, frame)
        assert frame["error"] in ("invalid_argument", "message_too_large", "bad_json",
                                  "bad_frame"), (what, door, frame)  # fmt: skip
        assert frame["detail"], (what, door)
        assert "\\ud" not in text.lower() and "\\u0000" not in text, (what, door)
    # what came past the doors was set aside by the router, with its reason
    mids = {entry["command"].get("messages", [{}])[0].get("mid"): entry["error"]
            for entry in refused
            if entry["command"].get("queue") in (queue, [queue])}  # fmt: skip
    unreadable = [e for e in refused if e["command"].get("unreadable")]
    assert "lone surrogate" in mids["raw-surrogate"]
    assert "not a finite number" in mids["raw-nan"]
    assert "beyond 64 bits" in mids["raw-big"]
    assert "TypeError" in mids["raw-unhashable"]
    assert unreadable and unreadable[0]["error"] == "a command in the inbox is not readable JSON"
    # the router never stalled: publish-to-delivery latency of the good messages
    arrived = dict(zip(order, subscriber.arrived, strict=True))
    latencies = sorted(arrived[body] - sent_at[body] for body in sent_at)
    worst, p99 = latencies[-1], latencies[int(len(latencies) * 0.99)]
    # the good messages right behind each hostile inbox command: the router set it aside
    # (a rolled-back step, retried in parts) before it routed them
    behind = max(arrived[f"g{n}"] - sent_at[f"g{n}"]
                 for start in range(RAW_EVERY // 2 + 1, GOOD, RAW_EVERY)
                 for n in range(start, start + 10))  # fmt: skip
    report("poison suite", [
        f"{GOOD} good publishes in {published:.1f} s with {len(answers)} hostile "
        f"requests, {len(frames)} hostile WebSocket publish frames and {GOOD // RAW_EVERY} "
        f"hostile inbox commands; publish-to-delivery latency "
        f"median {statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
        f"max {worst * 1000:.1f} ms; right behind a hostile inbox command at most "
        f"{behind * 1000:.1f} ms"
    ])  # fmt: skip
    assert worst < LATENCY_LIMIT


def test_the_console_publish_form_refuses_hostile_headers_with_a_message(poison_service):
    """The console's test publish is a door too: headers typed as `name: value` that no
    later stage could carry are refused with a message on the queue page, never a 500, and
    nothing is published."""
    service = poison_service
    queue = unique("console")
    with service.client() as client:
        assert client.post("/api/queues", json={"name": queue}).status_code == 201
    with httpx.Client(base_url=service.url, follow_redirects=True, timeout=30) as browser:
        form = browser.get("/admin/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        browser.post(
            "/admin/login/?next=/admin/",
            data={"username": "admin", "password": "admin-password", "csrfmiddlewaretoken": csrf},
        )
        for typed, why in (
            ("x: NaN", "not a finite number"),
            ("x: 1e999", "not a finite number"),
            ("x: 123456789012345678901234567890", "beyond 64 bits"),
            ("x: " + "[" * 100_000 + "]" * 100_000, "Published message"),
        ):
            page = browser.post(f"/queues/{quote(queue, safe='')}/publish/", data={
                "address": "a", "body": "b", "headers": typed,
                "csrfmiddlewaretoken": browser.cookies["csrftoken"]})  # fmt: skip
            assert page.status_code == 200, (typed[:40], page.status_code)
            assert why in page.text, typed[:40]
    with service.client() as client:
        # only the last one, a string header (not a number), was published
        assert client.get(f"/api/queues/{queue}/stats").json()["published"] == 1
