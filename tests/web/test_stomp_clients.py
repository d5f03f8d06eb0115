"""STOMP as its users meet it: stomp.py clients against the running service (inline
routing), over both transports — plain TCP (`manage.py stomp_server`) and WebSocket
(/ws/stomp/, subprotocol v12.stomp). Publishing with receipts and the message fields
SEND maps to (SPEC §9, §8), /queue/ and /topic/ subscriptions with selectors, the ack
modes, prefetch as the credit window, NACK, redelivery after a consumer leaves (with or
without DISCONNECT), competing consumers, transactions and the consumers registry.

Each test uses destinations of its own; waiting is for events (a frame, a receipt, an
HTTP answer) with generous deadlines, never for a wall-clock margin.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import quote, urlsplit

import pytest
import stomp
from stomp.protocol import Protocol12
from stomp.utils import Frame

from tests.web.conftest import unique

WITHIN = 20.0  # seconds an awaited event may take (the machine may be busy)
TRANSPORTS = ["tcp", "websocket"]
KIND = {"tcp": "stomp-tcp", "websocket": "stomp-websocket"}


# -- helpers ----------------------------------------------------------------------------------
class Client(stomp.ConnectionListener):
    """A connected stomp.py client and everything it received, in order; `auto_ack`
    ACKs each MESSAGE as it arrives (as a worker does once it has done its job)."""

    def __init__(self, connection: stomp.Connection, auto_ack: bool = False) -> None:
        self.connection = connection
        self.auto_ack = auto_ack
        self.messages: list[Frame] = []
        self.receipts: set[str] = set()
        self.errors: list[Frame] = []
        self.session = ""
        self.disconnected = False
        self.changed = threading.Condition()

    # stomp.py's receiver thread calls these
    def on_connected(self, frame: Frame) -> None:
        self.session = frame.headers.get("session", "")

    def on_message(self, frame: Frame) -> None:
        if self.auto_ack and "ack" in frame.headers:
            self.ack(frame)
        with self.changed:
            self.messages.append(frame)
            self.changed.notify_all()

    def on_receipt(self, frame: Frame) -> None:
        with self.changed:
            self.receipts.add(frame.headers["receipt-id"])
            self.changed.notify_all()

    def on_error(self, frame: Frame) -> None:
        with self.changed:
            self.errors.append(frame)
            self.changed.notify_all()

    def on_disconnected(self) -> None:
        with self.changed:
            self.disconnected = True
            self.changed.notify_all()

    # what a test does with it
    def wait(self, check: Callable[[], bool], what: str, within: float = WITHIN) -> None:
        deadline = time.monotonic() + within
        with self.changed:
            while not check():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"waited {within} s for {what}; received {len(self.messages)} "
                        f"message(s), receipts {sorted(self.receipts)}, errors "
                        f"{[(e.headers, e.body) for e in self.errors]}"
                    )
                self.changed.wait(left)

    def take(self, count: int, within: float = WITHIN) -> list[Frame]:
        """The first `count` messages received (waiting for them)."""
        self.wait(lambda: len(self.messages) >= count, f"{count} message(s)", within)
        return self.messages[:count]

    def receipt(self, receipt: str) -> None:
        self.wait(lambda: receipt in self.receipts, f"receipt {receipt!r}")
        assert not self.errors, [(e.headers, e.body) for e in self.errors]

    def send(self, destination: str, body: str, receipt: str | None = None, **headers) -> None:
        if receipt is not None:
            headers["receipt"] = receipt
        self.connection.send(destination, body, headers=headers)

    def subscribe(self, destination: str, sid: str = "1", ack: str = "client-individual",
                  **headers) -> None:  # fmt: skip
        """SUBSCRIBE and wait for its receipt (the subscription is set up then)."""
        receipt = f"sub-{sid}-{uuid.uuid4().hex[:6]}"
        headers["receipt"] = receipt
        self.connection.subscribe(destination, sid, ack=ack, headers=headers)
        self.receipt(receipt)

    def ack(self, frame: Frame, receipt: str | None = None) -> None:
        self._settle(self.connection.ack, frame, receipt)

    def nack(self, frame: Frame, receipt: str | None = None) -> None:
        self._settle(self.connection.nack, frame, receipt)

    def _settle(self, settle: Callable, frame: Frame, receipt: str | None) -> None:
        if isinstance(self.connection, Protocol12):  # ACK id:<the MESSAGE's ack>
            settle(frame.headers["ack"], receipt=receipt)
        else:  # 1.1: ACK message-id:<...> subscription:<...>
            settle(frame.headers["message-id"], frame.headers["subscription"], receipt=receipt)
        if receipt is not None:
            self.receipt(receipt)

    def disconnect(self) -> None:
        """DISCONNECT (with a receipt) and wait until the connection is closed."""
        receipt = f"bye-{uuid.uuid4().hex[:6]}"
        self.connection.disconnect(receipt=receipt)
        self.wait(lambda: self.disconnected, "the end of the connection")

    def drop(self) -> None:
        """Close the socket without DISCONNECT (a client that crashed)."""
        self.connection.transport.disconnect_socket()
        self.wait(lambda: self.disconnected, "the end of the connection")


@pytest.fixture(params=TRANSPORTS)
def transport(request) -> str:
    return request.param


@pytest.fixture
def clients(service, stomp_port, transport) -> Iterator[Callable[..., Client]]:
    """Connect stomp.py clients over the test's transport (`over` another one); all are
    disconnected at the end of the test."""
    made: list[Client] = []
    ws_port = urlsplit(service.ws_url).port

    def connect(over: str | None = None, token: str | None = None, auto_ack: bool = False,
                version: str = "1.2", **options) -> Client:  # fmt: skip
        if (over or transport) == "tcp":
            kind = stomp.Connection12 if version == "1.2" else stomp.Connection11
            connection = kind([("127.0.0.1", stomp_port)], **options)
        else:
            connection = stomp.WSStompConnection(
                [("127.0.0.1", ws_port)], ws_path="/ws/stomp/",
                header={"Sec-WebSocket-Protocol": "v12.stomp"}, **options,
            )  # fmt: skip
        client = Client(connection, auto_ack)
        connection.set_listener("test", client)
        connection.connect("tests", token or service.admin_token, wait=True)
        made.append(client)
        return client

    yield connect
    for client in made:
        if client.connection.is_connected():
            try:
                client.connection.disconnect()
            except Exception:  # the test may have broken it on purpose
                pass


@pytest.fixture
def http(service):
    with service.client() as client:
        yield client


def make_queue(http, name: str, **settings) -> None:
    answer = http.post("/api/queues", json={"name": name, **settings})
    assert answer.status_code == 201, answer.text


def deliver(http, queue: str, destination: str, enabled: bool = True, **settings) -> int:
    """A queue whose every message goes to `destination`; the selector's id."""
    make_queue(http, queue, **settings)
    selector = {"when": "always", "action": "deliver", "target": destination, "enabled": enabled}
    answer = http.post(f"/api/queues/{quote(queue, safe='')}/selectors", json=selector)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def waiting(http, queue: str) -> list[dict]:
    answer = http.get(f"/api/queues/{quote(queue, safe='')}/waiting", params={"count": 1000})
    assert answer.status_code == 200, answer.text
    return answer.json()["messages"]


def stats(http, queue: str) -> dict:
    answer = http.get(f"/api/queues/{quote(queue, safe='')}/stats")
    assert answer.status_code == 200, answer.text
    return answer.json()


def queue_names(http) -> set[str]:
    answer = http.get("/api/queues")
    assert answer.status_code == 200, answer.text
    return {queue["name"] for queue in answer.json()["queues"]}


def eventually(check: Callable[[], object], what: str, within: float = WITHIN):
    """What `check()` returns once it is true; fails after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {within} s for {what}")
        time.sleep(0.05)


def bodies(frames: list[Frame]) -> list[str]:
    return [frame.body for frame in frames]


# -- publishing -------------------------------------------------------------------------------
def test_every_send_gets_its_receipt_and_the_messages_wait_in_the_queue(http, clients):
    queue = unique()
    make_queue(http, queue)
    client = clients()
    for n in range(20):
        client.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}")
    client.wait(lambda: len(client.receipts) == 20, "20 receipts")
    assert client.receipts == {f"r{n}" for n in range(20)} and not client.errors
    assert [m["body"] for m in waiting(http, queue)] == [f"m{n}" for n in range(20)]


def test_send_keeps_headers_and_content_type_and_reply_to_is_the_return_address(http, clients):
    queue = unique()
    make_queue(http, queue)
    client = clients()
    client.send(f"/queue/{queue}", '{"n": 1}', receipt="r", **{
        "content-type": "application/json", "region": "eu", "x-trace": "abc",
        "reply-to": "/queue/answers"})  # fmt: skip
    client.receipt("r")
    [message] = waiting(http, queue)
    assert message["body"] == '{"n": 1}' and message["return_address"] == "answers"
    headers = message["headers"]
    assert headers["content-type"] == "application/json"
    assert headers["region"] == "eu" and headers["x-trace"] == "abc"
    assert not {"destination", "receipt", "content-length", "reply-to"} & set(headers)


def test_a_message_carries_its_fields_to_the_subscriber(http, clients):
    queue, destination = unique(), unique("d")
    deliver(http, queue, destination)
    consumer, producer = clients(), clients()
    consumer.subscribe(f"/queue/{destination}")
    producer.send(f"/queue/{queue}", "hello", receipt="r", **{
        "content-type": "text/plain", "region": "eu", "reply-to": "/queue/back"})  # fmt: skip
    producer.receipt("r")
    [frame] = consumer.take(1)
    headers = frame.headers
    assert frame.body == "hello"
    assert headers["subscription"] == "1" and headers["destination"] == f"/queue/{destination}"
    assert headers["ack"] == headers["message-id"]
    assert headers["redelivered"] == "false" and headers["x-delivery-count"] == "1"
    assert headers["seq"] == "1" and headers["mid"]
    assert headers["content-type"] == "text/plain" and headers["region"] == "eu"
    assert headers["reply-to"] == "/queue/back"
    consumer.ack(frame, receipt="acked")
    eventually(lambda: stats(http, queue)["confirmed"] == 1, "the ack to be counted")


def test_a_stomp_1_1_client_publishes_and_acks_by_message_id(http, clients):
    queue, destination = unique(), unique("d")
    deliver(http, queue, destination)
    client = clients(version="1.1")
    client.subscribe(f"/queue/{destination}")
    client.send(f"/queue/{queue}", "hello", receipt="r")
    [frame] = client.take(1)
    client.ack(frame, receipt="acked")
    assert frame.body == "hello"
    eventually(lambda: stats(http, queue)["confirmed"] == 1, "the ack to be counted")


# -- message lifetime: priority, expires, delay -----------------------------------------------
def test_priority_orders_what_waits_in_the_queue(http, clients):
    queue, destination = unique(), unique("d")
    selector = deliver(http, queue, destination, enabled=False, priorities=10)
    producer = clients()
    for body, priority in [("low", 1), ("high", 9), ("none", None), ("mid", 5)]:
        headers = {} if priority is None else {"priority": str(priority)}
        producer.send(f"/queue/{queue}", body, receipt=body, **headers)
        producer.receipt(body)
    assert {m["body"]: m["headers"].get("priority") for m in waiting(http, queue)} == {
        "low": 1, "high": 9, "none": None, "mid": 5}  # fmt: skip
    consumer = clients()
    consumer.subscribe(f"/queue/{destination}")
    answer = http.patch(f"/api/queues/{queue}/selectors/{selector}", json={"enabled": True})
    assert answer.status_code == 200, answer.text
    found = consumer.take(4)
    assert bodies(found) == ["high", "mid", "low", "none"]
    assert [frame.headers.get("priority") for frame in found] == ["9", "5", "1", None]


def test_an_already_expired_message_is_never_delivered(http, clients):
    queue, destination, dead = unique(), unique("d"), unique("dead")
    make_queue(http, dead)
    deliver(http, queue, destination, dead_letter=dead)
    consumer, producer = clients(), clients()
    consumer.subscribe(f"/queue/{destination}")
    past = int((time.time() - 60) * 1000)  # STOMP's expires: epoch milliseconds
    future = int((time.time() + 3600) * 1000)
    producer.send(f"/queue/{queue}", "stale", receipt="r1", expires=str(past))
    producer.send(f"/queue/{queue}", "fresh", receipt="r2", expires=str(future))
    producer.receipt("r2")
    [frame] = consumer.take(1)
    assert frame.body == "fresh" and "expires" not in frame.headers
    [letter] = eventually(lambda: waiting(http, dead), "the expired message's dead letter")
    assert letter["body"] == "stale" and letter["headers"]["x-reason"] == "expired"
    assert stats(http, queue)["expired"] == 1
    assert bodies(consumer.messages) == ["fresh"]


def test_a_delayed_message_arrives_only_after_its_delay(http, clients):
    queue, destination = unique(), unique("d")
    deliver(http, queue, destination)
    consumer, producer = clients(), clients()
    consumer.subscribe(f"/queue/{destination}")
    sent = time.monotonic()
    producer.send(f"/queue/{queue}", "later", receipt="r1", delay="1500")
    producer.send(f"/queue/{queue}", "now", receipt="r2")
    producer.receipt("r2")
    first = consumer.take(1)[0]
    assert first.body == "now"
    later = consumer.take(2)[1]
    arrived = time.monotonic()
    assert later.body == "later" and "delay" not in later.headers
    assert arrived - sent >= 1.5  # never before its time (how much later is not asserted)


def test_a_scheduled_message_is_listed_until_due(http, clients):
    queue = unique()
    make_queue(http, queue)
    producer = clients()
    producer.send(f"/queue/{queue}", "tomorrow", receipt="r", delay=str(86_400_000))
    producer.receipt("r")

    def scheduled():
        answer = http.get(f"/api/queues/{quote(queue, safe='')}/scheduled")
        return answer.json()["messages"]

    [message] = eventually(scheduled, "the message among the scheduled")
    assert message["body"] == "tomorrow" and message["delay"] == 86_400
    assert waiting(http, queue) == []


def test_a_delayed_message_whose_expires_comes_before_its_delay_is_never_delivered(http, clients):
    queue, destination, dead = unique(), unique("d"), unique("dead")
    make_queue(http, dead)
    deliver(http, queue, destination, dead_letter=dead)
    consumer, producer = clients(), clients()
    consumer.subscribe(f"/queue/{destination}")
    expires = str(int((time.time() + 0.2) * 1000))
    producer.send(f"/queue/{queue}", "too late", receipt="r1", delay="1000", expires=expires)
    producer.send(f"/queue/{queue}", "fine", receipt="r2", delay="1000")
    producer.receipt("r2")
    [letter] = eventually(lambda: waiting(http, dead), "the expired message's dead letter")
    assert letter["body"] == "too late" and letter["headers"]["x-reason"] == "expired"
    assert bodies(consumer.take(1)) == ["fine"]
    assert bodies(consumer.messages) == ["fine"]
