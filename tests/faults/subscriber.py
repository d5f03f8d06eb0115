"""A subscriber process for the fault suite, over WebSocket (/ws/subscribe/) or STOMP (TCP):
it records every delivery it receives and every ack it sends, one line each, so a test can
kill it (-9) at any moment and still read what it held.

    python -m tests.faults.subscriber URL TOKEN DESTINATION LOG [--credit N] [--hold N]

URL: the service's ws://host:port, or stomp://host:port for its STOMP server (stomp.py, a
/queue/ subscription with ack client-individual and prefetch-count --credit).

Lines (tab-separated; `t` is time.time(), comparable across processes on one machine):
    start  0 <t> <pid>
    open   <connection> <t>
    recv   <connection> <t> <mid> <body> <redelivered>
    ack    <connection> <t> <mid>
    close  <connection> <t> <why>

It reconnects whenever its connection ends (a web server, a STOMP server or Redis
restarting under it), until SIGTERM; over STOMP with a growing pause (0.1 s, doubling, at
most 1 s) while the server refuses. `--hold N` (WebSocket): after N deliveries it stops
acking (and keeps what it has), so a test can kill it while it holds unacked deliveries;
it writes `holding` when it does. SIGUSR1 does that from the moment it arrives (the test
decides when: held deliveries must not outlive the delivery timeout before the kill), and
`holding` is written once a full window (--credit) is held unacked; over STOMP the next
connection acks as usual. A STOMP connection closed by SIGTERM while it
holds deliveries unacked (they go back to the others) closes with why `stopped holding N`,
not `stopped`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import stomp
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

stopping = False
hold_now = threading.Event()  # SIGUSR1: the connection stops acking
Write = Callable[..., None]


def _stop(*_: object) -> None:
    global stopping
    stopping = True


def _hold(*_: object) -> None:
    hold_now.set()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("destination")
    parser.add_argument("log")
    parser.add_argument("--credit", type=int, default=100)
    parser.add_argument("--hold", type=int, default=0)
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGUSR1, _hold)
    log = os.open(options.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(*fields: object) -> None:
        os.write(log, ("\t".join(str(f) for f in fields) + "\n").encode())

    write("start", 0, time.time(), os.getpid())
    if options.url.startswith("stomp://"):
        stomp_subscriber(options, write)
    else:
        websocket_subscriber(options, write)


def deliveries(socket: ClientConnection, stop: Callable[[], bool], wait: float,
               loads: Callable[[bytes], Any] = json.loads) -> Iterator[list[dict]]:  # fmt: skip
    """The deliveries of each frame a /ws/subscribe/ socket receives (a deliveries frame's
    items, or a delivery frame), until `stop()`, which is asked at least every `wait` s."""
    while not stop():
        try:
            frame = loads(socket.recv(timeout=wait, decode=False))
        except TimeoutError:
            continue
        items = frame.get("items") or ([frame] if frame["type"] == "delivery" else [])
        if items:
            yield items


def websocket_subscriber(options: argparse.Namespace, write: Write) -> None:
    url = (
        f"{options.url}/ws/subscribe/{quote(options.destination, safe='')}/"
        f"?token={options.token}&heartbeat=1"
    )
    received = held = 0
    told = False
    connection = 0
    while not stopping:
        connection += 1
        try:
            with connect(url, open_timeout=5, close_timeout=1) as socket:
                first = json.loads(socket.recv(timeout=10))
                if first.get("type") != "subscribed":
                    write("close", connection, time.time(), f"refused {first}")
                    time.sleep(0.2)
                    continue
                write("open", connection, time.time())
                socket.send(json.dumps({"type": "credit", "n": options.credit, "batch": 50}))
                for items in deliveries(socket, lambda: stopping, 0.5):
                    now = time.time()
                    for item in items:
                        message = item["message"]
                        write("recv", connection, now, message["mid"], message["body"],
                              int(item["redelivered"]))  # fmt: skip
                    received += len(items)
                    if hold_now.is_set():  # keep them unacked; the test kills us
                        held += len(items)
                        if held >= options.credit and not told:
                            write("holding", connection, time.time())  # a full window
                            told = True
                        continue
                    if options.hold and received >= options.hold:
                        write("holding", connection, time.time())
                        continue  # keep them unacked; the test kills us
                    socket.send(json.dumps({"type": "ack", "tags": [i["tag"] for i in items]}))
                    now = time.time()
                    for item in items:
                        write("ack", connection, now, item["message"]["mid"])
                    socket.send(json.dumps({"type": "credit", "n": len(items)}))
                write("close", connection, time.time(), "stopped")
        except (ConnectionClosed, InvalidHandshake, InvalidStatus, OSError, TimeoutError) as why:
            write("close", connection, time.time(), type(why).__name__)
            time.sleep(0.2)


class _StompConnection(stomp.ConnectionListener):
    """One STOMP connection's deliveries: each recorded, then acked (stomp.py's receiver
    thread calls on_message), unless the connection holds (SIGUSR1) or is closing."""

    def __init__(self, connection: stomp.Connection12, number: int, credit: int,
                 write: Write) -> None:  # fmt: skip
        self.connection = connection
        self.number = number
        self.credit = credit
        self.write = write
        self.lock = threading.Lock()  # on_message against close(): an ack never follows it
        self.closing = False
        self.held = 0  # deliveries kept unacked
        self.ended = threading.Event()
        self.ended_at = 0.0  # when stomp.py saw the connection end
        self.why = "disconnected"

    def on_message(self, frame: stomp.utils.Frame) -> None:
        headers = frame.headers
        with self.lock:
            self.write("recv", self.number, time.time(), headers["mid"], frame.body,
                       int(headers["redelivered"] == "true"))  # fmt: skip
            if self.closing or hold_now.is_set():
                self.held += 1
                if hold_now.is_set() and self.held == self.credit:
                    self.write("holding", self.number, time.time())
                return
            self.connection.ack(headers["ack"])
            self.write("ack", self.number, time.time(), headers["mid"])

    def on_error(self, frame: stomp.utils.Frame) -> None:
        self.why = f"ERROR {frame.headers.get('message', '')}"

    def on_disconnected(self) -> None:
        self.ended_at = time.time()
        self.ended.set()

    def close(self) -> str:
        """DISCONNECT (SIGTERM), after which nothing is acked; why the connection ended."""
        with self.lock:
            self.closing = True
        try:
            self.connection.disconnect(receipt=f"bye-{self.number}")
        except stomp.exception.StompException:
            pass
        self.ended.wait(10)
        return f"stopped holding {self.held}" if self.held else "stopped"


def stomp_subscriber(options: argparse.Namespace, write: Write) -> None:
    where = urlsplit(options.url)
    pause = 0.1
    number = 0
    while not stopping:
        number += 1
        connection = stomp.Connection12([(where.hostname, where.port)], heartbeats=(0, 0),
                                        reconnect_attempts_max=1)  # fmt: skip
        listener = _StompConnection(connection, number, options.credit, write)
        connection.set_listener("subscriber", listener)
        try:
            connection.connect("faults", options.token, wait=True)
            connection.subscribe(f"/queue/{options.destination}", "1", ack="client-individual",
                                 headers={"prefetch-count": str(options.credit)})  # fmt: skip
        except (stomp.exception.StompException, OSError) as why:
            write("close", number, time.time(), type(why).__name__)
            time.sleep(pause)
            pause = min(2 * pause, 1.0)
            continue
        write("open", number, time.time())
        pause = 0.1
        while not stopping and not listener.ended.wait(0.2):
            pass
        if listener.ended.is_set():
            write("close", number, listener.ended_at, listener.why)
            hold_now.clear()  # the next connection acks as usual
            time.sleep(pause)
        else:
            write("close", number, time.time(), listener.close())


if __name__ == "__main__":
    main()
