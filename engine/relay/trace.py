"""Where a lone message's time goes: timestamps a traced message gathers on its path
(bench-only; bench/stomp_bench.py --paced, docs/live-path.md).

A message whose headers hold TRACE (`xump-trace`, any value) is traced; every other message
costs one header lookup at each place below and nothing more. The name is Xump's own: a
program's header of another name (`x-trace` was one, in the STOMP client tests) is never
touched. Stamps are epoch seconds
(time.time(): every process of one machine reads the same clock).

* Stamps known before the message moves on ride in the header itself, which the router
  keeps and the MESSAGE frame carries: `recv=<t>` (the STOMP server read the SEND) and
  `learn=<t>` (the subscriber's process took the delivery off its outbox), as
  "recv=<t> learn=<t>".
* Stamps known only after the message has moved on (a write came back durable, a frame
  went out) are published on the store's trace channel (`trace_channel`: Redis pub/sub,
  no AOF, no fsync), one line per batch, "<hop> <t> <mid> <mid>...", beside the path (the
  STOMP server in a task nothing waits for; the router after its step). Hops: `inbox`
  (the STOMP server's inbox append came back: durable), `step` (the router's routing step
  came back: durable), `write` (the MESSAGE frame was handed to the socket). A reader
  subscribes before the messages go and matches the lines to MESSAGE frames by their
  `mid` header.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

TRACE = "xump-trace"


def trace_channel(store: str) -> str:
    """The store's trace channel (pub/sub)."""
    return f"xump:{{{store}}}:trace"


def stamped(headers: Mapping[str, Any], hop: str, at: float | None = None) -> dict[str, Any]:
    """`headers` with the stamp `hop=<t>` added to the trace header (the client's own value
    is replaced by the first stamp)."""
    at = time.time() if at is None else at
    before = headers.get(TRACE)
    text = f"{hop}={at:.6f}"
    if isinstance(before, str) and "=" in before:
        text = f"{before} {text}"
    return {**headers, TRACE: text}


def trace_line(hop: str, at: float, mids: list[str]) -> bytes:
    """One trace-channel line: `hop` happened at `at` for the messages `mids`."""
    return f"{hop} {at:.6f} {' '.join(mids)}".encode()


def parse_line(raw: bytes | str) -> tuple[str, float, list[str]]:
    """(hop, time, mids) of a trace-channel line."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    hop, at, *mids = text.split(" ")
    return hop, float(at), mids


def parse_header(value: str) -> dict[str, float]:
    """The stamps a MESSAGE frame's trace header carries: {hop: time}."""
    found: dict[str, float] = {}
    for part in value.split(" "):
        hop, _, at = part.partition("=")
        if at:
            found[hop] = float(at)
    return found
