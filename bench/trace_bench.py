"""Lineage and explain (SPEC §12): how long a message's trace takes from the Parquet
archive as it grows, and an explanation against the publish it describes. Prints figures;
asserts nothing.

    python bench/trace_bench.py [--queues 10] [--exports 200] [--per 500] [--selectors 2000]

Writes an archive of queues x exports x per `publish` events (the defaults: 1,000,000 events
in 2,000 files, about 17 hours of light traffic archived every 5 minutes) into a scratch
directory, then looks up an unknown mid, an early one and a late one, three times each.
A trace reads the archive for messages older than the live journal.

Then a queue of --selectors COPY selectors, each of three conditions (two regexes and a
prefix): a publish and an explanation of the same message, each the median of five (an
explanation runs under the engine's lock, as routing does).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from engine import Engine, Message
from engine.archive import Archive


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--exports", type=int, default=200)
    parser.add_argument("--per", type=int, default=500, help="events a queue an export")
    parser.add_argument("--selectors", type=int, default=2000)
    options = parser.parse_args()
    archive_figures(options)
    explain_figures(options.selectors)


def median_ms(call, times: int = 5) -> float:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent) * 1000


def explain_figures(count: int) -> None:
    engine = Engine(journal=True)
    engine.queue_create("router")
    for n in range(count):
        engine.queue_create(f"sub{n}")
        selector = engine.selector_create("router")
        selector.when_match("regex", f"stock\\.s{n}\\.[a-z]+(\\.[0-9]{{1,5}})?")
        selector.and_match("prefix", "x", field="header:h")
        selector.and_match("regex", "[a-z]{1,20}", field="header:k")
        selector.do_copy(f"sub{n}").enable()
    message = Message(address="stock.s5.price", headers={"h": "x1", "k": "abc"})
    publish = median_ms(lambda: engine.publish("router", message))
    explain = median_ms(lambda: engine.explain("router", message))
    print(f"a queue of {count:,} selectors of 3 conditions: publish {publish:,.1f} ms, "
          f"explain {explain:,.1f} ms")  # fmt: skip


def archive_figures(options: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        archive = Archive(scratch)
        started, position = time.perf_counter(), 1
        for export in range(options.exports):
            events = [
                (1.7e9 + export * 300 + n * 0.01, "publish", f"m{export}-{queue}-{n}",
                 f"queue{queue}", None, None, str(n), "a.b", None)
                for queue in range(options.queues)
                for n in range(options.per)
            ]  # fmt: skip
            archive.write_events(events, epoch="bench", first=position)
            position += len(events)
        files = sum(len(names) for _, _, names in os.walk(scratch))
        print(f"archive: {position - 1:,} events in {files:,} files, written in "
              f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        last = f"m{options.exports - 1}-{options.queues - 1}-{options.per - 1}"
        for label, mid in (("unknown mid", "nope-1"), ("early mid", "m0-0-0"), ("late mid", last)):
            times = []
            for _ in range(3):
                started = time.perf_counter()
                found = archive.events_of(mid)
                times.append(time.perf_counter() - started)
            print(f"  events_of({label}): {len(found)} event(s), median "
                  f"{statistics.median(times) * 1000:,.0f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
