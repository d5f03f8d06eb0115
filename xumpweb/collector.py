"""Python's garbage collector in the long-running processes that carry messages (the web
process, the STOMP server, the Celery worker that routes), set once start-up is over.

What Django and the imports made lives as long as the process: frozen (gc.freeze), out
of the collector's sight, so its full collections, which every message's objects
trigger, do not walk it again and again. A message's objects live while it is in flight
(its frames, its pending publish, its unsettled entry, the router's step): thousands of
allocations, so at the default threshold (700) young collections moved them up a
generation to be walked again. At 20,000 most die young. Garbage cycles live a little
longer (the STOMP server's memory did not grow with it; the worker's was not measured).

Measured. The STOMP server: gen-2 collection time in a 100k-message bench run 0.97 ->
0.39 s (freeze), GC time 0.55 -> 0.09 s (the threshold). The Celery worker, STOMP end to
end bench (bench/stomp_bench.py --only xump --messages 50000, three interleaved rounds,
load average 5-7, the settings applied 8 s after the worker started): CPU per message
90, 84, 89 us by default; 70, 76, 63 frozen; 52, 59, 54 frozen with the threshold; its
GC's CPU 1.4-1.9 s -> 0.5-0.7 s of 8-10 s. Its full collections had walked Django's,
Celery's and the imports' ~150k objects (and paused it for up to 0.8 s on that loaded
machine). Latency at 1,000 SENDs a second (--paced 1000, four interleaved rounds, load
4.5-5.8): SEND -> MESSAGE p99 1303, 388, 450, 327 ms by default, 597, 229, 340, 98 ms
settled; no stall seen, though a loaded machine says little about p99.

The web process (uvicorn, xumpweb/asgi.py: settled once the application is built), in the
JSON WebSocket end to end run (bench/service_bench.py --e2e-only --only xump --messages
100000, 2026-11-26, three interleaved rounds, load average 7-8.6): CPU per message 23,
21, 21 us by default, 18, 19, 17 settled. By default a gc callback counted, in a run of
150,000 messages, 5 full collections of about 150 ms each (0.74 s) and 0.39 s of younger
ones: a third of that process's CPU, and a pause of the whole event loop (every
subscriber's frames, every publish's answer) each time.
"""

from __future__ import annotations

import gc

YOUNG = 20_000  # allocations between young collections (the default is 700)


def settle() -> None:
    """Freeze what start-up made and raise the young generation's threshold; call once,
    when the process is ready to carry messages."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG, 10, 10)
