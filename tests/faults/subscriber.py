"""A WebSocket subscriber process for the fault suite: it records every delivery it receives
and every ack it sends, one line each, so a test can kill it (-9) at any moment and still
read what it held.

    python -m tests.faults.subscriber URL TOKEN DESTINATION LOG [--credit N] [--hold N]

Lines (tab-separated; `t` is time.time(), comparable across processes on one machine):
    start  0 <t> <pid>
    open   <connection> <t>
    recv   <connection> <t> <mid> <body> <redelivered>
    ack    <connection> <t> <mid>
    close  <connection> <t> <why>

It reconnects whenever its connection ends (a web server or Redis restarting under it),
until SIGTERM. `--hold N`: after N deliveries it stops acking (and keeps what it has), so
a test can kill it while it holds unacked deliveries; it writes `holding` when it does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from urllib.parse import quote

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import connect

stopping = False


def _stop(*_: object) -> None:
    global stopping
    stopping = True


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
    log = os.open(options.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(*fields: object) -> None:
        os.write(log, ("\t".join(str(f) for f in fields) + "\n").encode())

    url = (
        f"{options.url}/ws/subscribe/{quote(options.destination, safe='')}/"
        f"?token={options.token}&heartbeat=1"
    )
    received = 0
    connection = 0
    write("start", 0, time.time(), os.getpid())
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
                while not stopping:
                    try:
                        frame = json.loads(socket.recv(timeout=0.5))
                    except TimeoutError:
                        continue
                    items = frame.get("items") or ([frame] if frame["type"] == "delivery" else [])
                    if not items:
                        continue
                    now = time.time()
                    for item in items:
                        message = item["message"]
                        write("recv", connection, now, message["mid"], message["body"],
                              int(item["redelivered"]))  # fmt: skip
                    received += len(items)
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


if __name__ == "__main__":
    main()
