"""stomp.py clients of the running service, for the STOMP tests of tests/web/: `Client`
(a connection's listener and everything it received) and `stomp_connection` over TCP or
WebSocket. The fixtures that connect them (`transport`, `connect`, `clients`,
`durable_client`) are in conftest.py.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

import stomp
from stomp.protocol import Protocol12
from stomp.utils import Frame

WITHIN = 60.0  # seconds an awaited event may take (the machine may be busy)
TRANSPORTS = ["tcp", "websocket"]


class Client(stomp.ConnectionListener):
    """A stomp.py connection's listener and everything it received, in order; `auto_ack`
    ACKs each MESSAGE as it arrives (as a worker does once it has done its job)."""

    def __init__(self, connection: stomp.Connection, auto_ack: bool = False) -> None:
        connection.set_listener("test", self)
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

    def send_numbered(self, queue: str, count: int) -> None:
        """SEND m0, m1, ... (`count` of them) to /queue/`queue`, each asking for its receipt
        r0, r1, ... (not awaited)."""
        for n in range(count):
            self.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}")

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

    def unsubscribe(self, sid: str = "1") -> None:
        receipt = f"unsub-{sid}-{uuid.uuid4().hex[:6]}"
        self.connection.unsubscribe(sid, headers={"receipt": receipt})
        self.receipt(receipt)

    def drop(self) -> None:
        """End the TCP connection without DISCONNECT or a WebSocket close (as the kernel
        does for a process that crashed). A shutdown, not only a close: stomp.py's
        receiver thread is blocked reading the socket, and a close alone sends nothing
        while it is."""
        sock = self.connection.transport.socket
        sock = getattr(sock, "sock", sock)  # websocket-client's WebSocket holds the socket
        sock.shutdown(socket.SHUT_RDWR)
        self.wait(lambda: self.disconnected, "the end of the connection")


STOMP_PY = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


def stomp_connection(service, stomp_port: int, over: str = "tcp", version: str = "1.2",
                     **options) -> stomp.Connection:  # fmt: skip
    """A stomp.py connection to the service, not yet connected: over "tcp" (speaking that
    STOMP version) or "websocket" (1.2)."""
    if over == "tcp":
        return STOMP_PY[version]([("127.0.0.1", stomp_port)], **options)
    return stomp.WSStompConnection(
        [("127.0.0.1", urlsplit(service.ws_url).port)], ws_path="/ws/stomp/",
        header={"Sec-WebSocket-Protocol": "v12.stomp"}, **options,
    )  # fmt: skip


def disconnect_all(made: list[Client]) -> None:
    """Disconnect the clients still connected (a test may have broken one on purpose)."""
    for client in made:
        if client.connection.is_connected():
            try:
                client.connection.disconnect()
            except Exception:
                pass


def queue_names(http, prefix: str = "") -> set[str]:
    """Every queue's name (starting with `prefix`), page after page (the list is paged:
    issue 21)."""
    names: set[str] = set()
    after = None
    while True:
        params = {"limit": 1000, "prefix": prefix, **({"after": after} if after else {})}
        answer = http.get("/api/queues", params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        names.update(queue["name"] for queue in page["queues"])
        after = page["next"]
        if not after:
            return names


def made_since(http, before: set[str], clients: list[Client], *words: str) -> set[str]:
    """The queues made since `before` that these clients could have made: a private queue
    of one of their connections, or a name holding one of `words` (the destination's
    parts). Other tests run at once against the same service and make queues of their
    own, so "no new queue at all" would be a race."""
    sessions = [f":{client.session}:" for client in clients if client.session]
    return {
        name
        for name in queue_names(http) - before
        if any(session in name for session in sessions) or any(w and w in name for w in words)
    }
