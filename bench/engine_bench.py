"""Engine throughput on the RAM store (issue: engine core). Prints figures; asserts nothing.

    python bench/engine_bench.py            # full run (about a minute)
    python bench/engine_bench.py --quick    # smaller counts, for a smoke run
    python bench/engine_bench.py --only h   # only the figures named (letters a to h)

(a) wolfpack, 2 workers, credit 10: publish -> deliver -> confirm, messages/s
(b) parrot, one router, 10 subscribers: deliveries/s (publish, deliver, confirm together)
(c) topic routing: publishes/s through a router holding N topic patterns, for several N
(d) a network of 1,000 queues x 10 selectors: publish -> deliver -> confirm, messages/s
(e) regex attack: while a thread publishes hostile addresses (up to 64 KB of a's and a b)
    against catastrophic patterns such as `(a+)+$`, how long other traffic's publishes
    (routed and delivered) take, worst and 99th percentile, in ms
(f) several conditions (SPEC §12): publishes/s through a router of 100 selectors with one
    MATCH each, then with three (address, return address, a header); the ratio of the cost
(g) targets from the envelope: publishes/s of a MOVE whose target a header names, against
    the same MOVE with a fixed target
(h) the journal: (a) with the engine's event journal on (drained every 10,000 messages)
    against off; the lineage (eng.trace) reads only what it records. A wolfpack message
    records four events (publish, route, deliver, confirm). One pair of runs moves by ±10 %
    even on a quiet machine, so (h) alternates off and on seven times and compares medians.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import threading
import time
from collections import deque

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from engine import Engine, Message
from engine.patterns import parrot, wolfpack


def timed(run) -> float:
    gc.collect()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def bench_wolfpack(count: int, journal: bool = False) -> float:
    """(a), and (h) with `journal`: the journal drained every 10,000 messages."""
    eng = Engine(journal=journal)
    for worker in ("w1", "w2"):
        wolfpack(eng, "jobs", worker, credit=10)
    message = Message(address="job", body=b"x" * 100)
    publish, confirm = eng.publish, eng.confirm

    def run() -> None:
        waiting: deque = deque()
        # in runs of 10,000 with a drain between, so the loop tests nothing per message
        # that the run without the journal does not (the test was 2 % of the figure)
        for start in range(0, count, 10_000):
            for _ in range(min(10_000, count - start)):
                waiting.extend(publish("jobs", message))
                while len(waiting) > 10:
                    waiting.extend(confirm(waiting.popleft()))
            if journal:
                eng.journal.drain()
        while waiting:
            waiting.extend(confirm(waiting.popleft()))

    seconds = timed(run)
    assert eng.stats("jobs")["routed"] == count
    return count / seconds


def bench_wolfpack_batched(count: int, batch: int = 100) -> float:
    eng = Engine()
    for worker in ("w1", "w2"):
        wolfpack(eng, "jobs", worker, credit=batch)
    messages = [Message(address="job", body=b"x" * 100)] * batch
    publish_many, confirm_many = eng.publish_many, eng.confirm_many

    def run() -> None:
        for _ in range(count // batch):
            waiting = publish_many("jobs", messages)
            while waiting:
                waiting = confirm_many(waiting)

    seconds = timed(run)
    assert eng.stats("jobs")["routed"] == count // batch * batch
    return count / seconds


def bench_parrot(count: int, subscribers: int = 10) -> float:
    eng = Engine()
    for n in range(subscribers):
        parrot(eng, f"sub{n}", "stock.#")
    message = Message(address="stock.ibm.price", body=b"x" * 100)
    publish, confirm_many = eng.publish, eng.confirm_many
    delivered = 0

    def run() -> None:
        nonlocal delivered
        for _ in range(count):
            deliveries = publish("parrot", message)
            confirm_many(deliveries)  # each publish's 10 deliveries acked together
            delivered += len(deliveries)

    seconds = timed(run)
    return delivered / seconds


def bench_topic(count: int, patterns: int, distinct: int = 1000, sinks: int = 100) -> float:
    """A router with `patterns` topic selectors copying into `sinks` subscriber queues
    (pattern n into queue n % sinks), each deleting what arrives. Keys match one pattern
    each and are drawn from `distinct` addresses (the trie remembers recent answers, so
    repeated keys are cheaper). The number of queues stays the same as patterns grow, so
    the figure shows how matching scales."""
    eng = Engine()
    eng.queue_create("router")
    for n in range(sinks):
        eng.queue_create(f"sink{n}")
        eng.selector_create(f"sink{n}").when_always().do_delete().enable()
    for n in range(patterns):
        pattern = f"stock.s{n}.*" if n % 2 else f"stock.s{n}.#"
        selector = eng.selector_create("router").when_match("topic", pattern)
        selector.do_copy(f"sink{n % sinks}").enable()
    rng = random.Random(7)
    messages = [Message(address=f"stock.s{rng.randrange(patterns)}.p{n}") for n in range(distinct)]
    publish = eng.publish

    def run() -> None:
        for n in range(count):
            publish("router", messages[n % distinct])

    seconds = timed(run)
    return count / seconds


def bench_network(count: int, queues: int = 1000, per_queue: int = 10) -> float:
    eng = Engine()
    names = [f"q{n}" for n in range(queues)]
    for name in names:
        eng.queue_create(name)
    for n, name in enumerate(names):
        for kind in range(per_queue - 1):
            sel = eng.selector_create(name).when_match("eq", f"kind{kind}")
            sel.do_deliver(f"app{(n + kind) % 10}").enable()
        eng.selector_create(name).when_default().do_delete().enable()
    rng = random.Random(11)
    work = [
        (rng.choice(names), Message(address=f"kind{rng.randrange(per_queue)}")) for _ in range(1000)
    ]
    publish, confirm = eng.publish, eng.confirm

    def run() -> None:
        for n in range(count):
            queue, message = work[n % 1000]
            for delivery in publish(queue, message):
                confirm(delivery)

    seconds = timed(run)
    return count / seconds


HOSTILE_PATTERNS = ("(a+)+$", "(a|aa)+$", "(a*)*b?c", "(.*a){12}", "([a-z]+)*[0-9]")


def bench_regex_attack(count: int) -> tuple[float, float, int, float]:
    """(worst, p99 delay in ms of an ordinary publish, hostile messages routed meanwhile,
    the longest one hostile publish took in ms: what one can hold the router for)."""
    eng = Engine()
    for name in ("in", "hostile"):
        eng.queue_create(name)
    for pattern in HOSTILE_PATTERNS:
        eng.selector_create("in").when_match("regex", pattern).do_copy("hostile").enable()
    eng.selector_create("in").when_match("eq", "ok").do_deliver("app").enable()
    stop = threading.Event()
    hostile = [0]
    longest = [0.0]

    def attack() -> None:
        length = 28
        while not stop.is_set():
            message = Message(address="a" * length + "b")
            start = time.thread_time()  # CPU time: what routing it cost, without the waits
            eng.publish("in", message)
            longest[0] = max(longest[0], time.thread_time() - start)
            hostile[0] += 1
            length = 28 if length > 65_536 else length * 2

    attacker = threading.Thread(target=attack)
    attacker.start()
    delays = []
    ok = Message(address="ok")
    try:
        for _ in range(count):
            start = time.perf_counter()
            [delivery] = eng.publish("in", ok)
            delays.append(time.perf_counter() - start)
            eng.confirm(delivery)
            time.sleep(0.001)  # let the attacker in between
    finally:
        stop.set()
        attacker.join()
    delays.sort()
    return delays[-1] * 1000, delays[int(len(delays) * 0.99)] * 1000, hostile[0], longest[0] * 1000


def bench_conditions(count: int, conditions: int, selectors: int = 100) -> float:
    eng = Engine()
    eng.queue_create("in")
    for number in range(selectors):
        sel = eng.selector_create("in").when_match("eq", f"k{number}")
        if conditions >= 2:
            sel.and_match("prefix", "desk", "return_address")
        if conditions >= 3:
            sel.and_match("eq", "eu", "region")
        sel.do_delete().enable()
    messages = [
        Message(address=f"k{n % selectors}", headers={"region": "eu"}, return_address="desk.1")
        for n in range(1000)
    ]
    publish = eng.publish

    def run() -> None:
        for n in range(count):
            publish("in", messages[n % 1000])

    seconds = timed(run)
    assert eng.stats("in")["routed"] == count
    return count / seconds


def bench_target_from(count: int, from_header: bool) -> float:
    eng = Engine()
    eng.queue_create("in")
    for name in ("a", "b"):
        eng.queue_create(name)
        eng.selector_create(name).when_always().do_delete().enable()
    sel = eng.selector_create("in").when_always()
    (sel.do_move(target_from="to") if from_header else sel.do_move("a")).enable()
    message = Message(address="x", headers={"to": "a"})
    publish = eng.publish

    def run() -> None:
        for _ in range(count):
            publish("in", message)

    seconds = timed(run)
    assert eng.stats("a")["routed"] == count
    return count / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts for a smoke run")
    parser.add_argument(
        "--only", default="abcdefgh", help="the figures to run, as letters (e.g. h, or ach)"
    )
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    only = set(args.only.lower())
    print(
        f"Xump engine benchmark (RAM store), Python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    if "a" in only:
        figure_a(scale)
    if "b" in only:
        figure_b(scale)
    if "c" in only:
        figure_c(scale, args.quick)
    if "d" in only:
        figure_d(scale)
    if "e" in only:
        figure_e(scale)
    if "f" in only or "g" in only:
        figure_fg(scale, only)
    if "h" in only:
        figure_h(scale)


def figure_a(scale: int) -> None:
    rate = bench_wolfpack(300_000 // scale)
    print(f"(a) wolfpack 2 workers, publish->deliver->confirm: {rate:>12,.0f} msg/s")
    rate = bench_wolfpack_batched(300_000 // scale)
    print(f"    the same in batches of 100 (publish_many, confirm_many): {rate:>10,.0f} msg/s")


def figure_b(scale: int) -> None:
    rate = bench_parrot(50_000 // scale)
    print(f"(b) parrot 10 subscribers, deliveries:            {rate:>12,.0f} deliveries/s")


def figure_c(scale: int, quick: bool) -> None:
    sizes = (100, 1_000, 10_000) if quick else (100, 1_000, 10_000, 100_000)
    per_message = {}
    for patterns in sizes:
        count = 1_000_000 // scale if patterns == 10_000 else 200_000 // scale
        rate = bench_topic(count, patterns)
        per_message[patterns] = 1e6 / rate
        print(
            f"(c) topic routing, {patterns:>7,} patterns, {count:>9,} publishes: "
            f"{rate:>10,.0f} msg/s ({1e6 / rate:.2f} us/msg)"
        )
    growth = per_message[sizes[-1]] / per_message[100]
    print(f"    time per message grows {growth:.2f}x from 100 to {sizes[-1]:,} patterns")
    count = 200_000 // scale
    rate = bench_topic(count, 10_000, distinct=count)
    print(
        f"(c) topic routing, 10,000 patterns, every key new (no cache help): {rate:>10,.0f} msg/s"
    )


def figure_d(scale: int) -> None:
    rate = bench_network(200_000 // scale)
    print(f"(d) 1,000 queues x 10 selectors, publish->deliver->confirm: {rate:>10,.0f} msg/s")


def figure_e(scale: int) -> None:
    worst, p99, hostile, longest = bench_regex_attack(2_000 // scale)
    print(
        f"(e) regex attack ({len(HOSTILE_PATTERNS)} catastrophic patterns, {hostile:,} hostile "
        f"addresses of 29 B-64 KB routed meanwhile): other traffic's delay worst "
        f"{worst:.1f} ms, p99 {p99:.1f} ms; one hostile message cost routing at most "
        f"{longest:.2f} ms of CPU"
    )


def figure_fg(scale: int, only: set[str]) -> None:
    count = 200_000 // scale
    if "f" in only:
        one, three = bench_conditions(count, 1), bench_conditions(count, 3)
        print(
            f"(f) 100 selectors, 1 condition: {one:>10,.0f} msg/s; 3 conditions: "
            f"{three:>10,.0f} msg/s; 3 cost {one / three:.2f}x of 1"
        )
    if "g" in only:
        fixed, named = bench_target_from(count, False), bench_target_from(count, True)
        print(
            f"(g) MOVE to a fixed target: {fixed:>10,.0f} msg/s; target from a header: "
            f"{named:>10,.0f} msg/s ({fixed / named:.2f}x)"
        )


def figure_h(scale: int, rounds: int = 7) -> None:
    """Off and on alternately, `rounds` times, so a busy moment costs both alike; the
    medians compared (one pair of runs moved by +-10 % on a quiet machine)."""
    runs: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for journal in (False, True):
            runs[journal].append(bench_wolfpack(100_000 // scale, journal))
    off, on = statistics.median(runs[False]), statistics.median(runs[True])
    print(
        f"(h) wolfpack journal off: {off:>10,.0f} msg/s; on: {on:>10,.0f} msg/s, medians of "
        f"{rounds} runs alternating ({(1 - on / off) * 100:+.1f}% slower with it; "
        f"on/off ranges {min(runs[True]):,.0f}-{max(runs[True]):,.0f} / "
        f"{min(runs[False]):,.0f}-{max(runs[False]):,.0f})"
    )


if __name__ == "__main__":
    main()
