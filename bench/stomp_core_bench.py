"""The STOMP frame machine alone: CPU per message, no I/O. Prints figures.

    python bench/stomp_core_bench.py [--messages N] [--rounds R]

What the STOMP server's protocol core (xumpweb/stomp/: parsing, the connection's state
machine, serialising) costs per message of stomp_bench.py's end to end run, without the
sockets, Redis, the session or the engine around it: a `StompConnection` fed SEND frames
(as stomp.py writes them: content-length and destination, a 100-byte body), 50 to a read;
`deliver()` of a delivery to a `client-individual` subscription (the MESSAGE frame); and
the ACK frames of those MESSAGEs, 50 to a read. The best of --rounds rounds, in µs per
frame (process time).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from types import MappingProxyType

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from engine.message import Delivery, Message
from xumpweb.stomp.connection import StompConnection

BODY = b"x" * 100
PER_READ = 50  # frames in one read of the socket


def connected() -> StompConnection:
    connection = StompConnection()
    connection.receive_data(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:l\npasscode:p\n\n\x00")
    connection.accept("principal", "session")
    connection.receive_data(
        b"SUBSCRIBE\nid:1\ndestination:/queue/bench-in\\cout\nack:client-individual\n"
        b"prefetch-count:1000\n\n\x00"
    )
    return connection


def fed(connection: StompConnection, frames: list[bytes]) -> float:
    """Process seconds to feed `frames`, PER_READ to a read."""
    reads = [b"".join(frames[i : i + PER_READ]) for i in range(0, len(frames), PER_READ)]
    started = time.process_time()
    for data in reads:
        connection.receive_data(data)
    return time.process_time() - started


def one_round(count: int) -> tuple[float, float, float]:
    connection = connected()
    send = b"SEND\ncontent-length:100\ndestination:/queue/bench-in\n\n" + BODY + b"\x00"
    sends = fed(connection, [send] * count)
    message = Message("", MappingProxyType({"content-type": "text/plain"}), BODY, None,
                      "m-1a2b3c-1", 1, time.time(), "bench-in:out")  # fmt: skip
    deliveries = [Delivery(f"t{n}", "bench-in:out", "bench-in", 1, message) for n in range(count)]
    first = connection._next_ack + 1
    started = time.process_time()
    for delivery in deliveries:
        connection.deliver("1", delivery)
    delivered = time.process_time() - started
    acks = fed(connection, [b"ACK\nid:%d\n\n\x00" % (first + n) for n in range(count)])
    if connection.unsettled():
        raise SystemExit("the ACKs did not settle every MESSAGE")
    return sends / count * 1e6, delivered / count * 1e6, acks / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = [one_round(args.messages) for _ in range(args.rounds)]
    best = [min(figures) for figures in zip(*rounds, strict=True)]
    print(f"STOMP frame machine, no I/O ({args.messages:,} messages, best of {args.rounds}; "
          f"load average {os.getloadavg()[0]:.2f})")  # fmt: skip
    for label, figure in zip(("SEND frame in", "MESSAGE frame out", "ACK frame in"), best,
                             strict=True):  # fmt: skip
        print(f"  {label:20} {figure:6.2f} us")
    print(f"  {'per message':20} {sum(best):6.2f} us")


if __name__ == "__main__":
    main()
