"""The data pipeline at scale (issue: data pipeline on Spark). Prints figures; asserts nothing.

    python bench/pipeline_bench.py [--count 10000000] [--master local[*]] [--archive DIR]

1. export: messages published through a real Engine (journal on) in chunks, each chunk's
   history and journal events exported to a Parquet archive (timed: the exports only);
2. traffic report over the archived events, in Spark;
3. backtest of one WHEN over the archived history, in Spark;
4. the same backtest by this single Python process: the Parquet read with pyarrow, each
   row made an engine Message and given to the engine's compiled filter (and the topic
   trie), as the engine would evaluate it; the ratio says how much faster Spark is.

`--archive DIR` keeps the archive there and, when DIR already holds one, skips step 1.
Targets on the 2-core development machine, at 10M rows: backtest >= 5x the single
process, traffic report <= 60 s.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pyarrow.dataset as ds

from engine import Engine, Message
from engine.archive import PARTITION_SCHEMA, export_engine, headers_of
from engine.filters import compile_filter
from engine.matching import TopicTrie
from engine.pipeline import backtest, traffic

CHUNK = 250_000
MATCH = ("topic", "stock.*.#")
FILTER = "priority > 5 AND region = 'eu'"
SYMBOLS = ["ibm", "aapl", "msft", "orcl", "sap", "goog", "amzn", "meta"]
REGIONS = ["eu", "us", "apac"]


def generate(path: Path, count: int) -> tuple[int, float]:
    """Publish `count` messages in chunks and export each; (rows written, export seconds)."""
    rng = random.Random(6)
    eng = Engine(journal=5 * CHUNK)
    eng.queue_create("ticks", history=CHUNK)
    eng.selector_create("ticks").when_always().do_delete().enable()
    rows, spent, done = 0, 0.0, 0
    while done < count:
        size = min(CHUNK, count - done)
        batch = [
            Message(
                address=f"stock.{rng.choice(SYMBOLS)}.{rng.choice(('price', 'trade'))}",
                headers={
                    "priority": rng.randrange(10),
                    "region": rng.choice(REGIONS),
                    "px": round(rng.uniform(1, 500), 2),
                },
                body=b"x" * 32,
            )
            for _ in range(size)
        ]
        for start in range(0, size, 1000):
            eng.publish_many("ticks", batch[start : start + 1000])
        started = time.perf_counter()
        result = export_engine(eng, path)
        spent += time.perf_counter() - started
        rows += result.history_rows + result.event_rows
        done += size
        print(f"  generated {done:,} messages", flush=True)
    return rows, spent


def python_backtest(path: Path) -> tuple[int, int, float]:
    """(examined, taken, seconds) of the backtest in this process with the engine's code."""
    selects = compile_filter(FILTER)
    trie = TopicTrie()
    trie.add(MATCH[1], "hit")
    started = time.perf_counter()
    dataset = ds.dataset(
        path / "history", partitioning=ds.partitioning(PARTITION_SCHEMA, flavor="hive")
    )
    columns = ["mid", "address", "headers_str", "headers_int", "headers_float", "headers_bool"]
    examined = taken = 0
    for batch in dataset.to_batches(columns=columns, batch_size=65_536):
        for row in batch.to_pylist():
            message = Message(address=row["address"], headers=headers_of(row), mid=row["mid"])
            examined += 1
            if trie.match(message.address) and selects(message):
                taken += 1
    return examined, taken, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000_000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--archive", help="keep (or reuse) the archive in this directory")
    options = parser.parse_args()
    keep = options.archive is not None
    path = Path(options.archive or tempfile.mkdtemp(prefix="xump-pipeline-bench-"))
    out = Path(tempfile.mkdtemp(prefix="xump-pipeline-out-"))
    try:
        if (path / "manifest.json").exists():
            print(f"reusing the archive in {path}")
        else:
            print(f"generating {options.count:,} messages into {path}")
            rows, spent = generate(path, options.count)
            rate = rows / spent
            print(f"export:   {rows:,} rows (history + events), {spent:.1f} s: {rate:,.0f} rows/s")

        started = time.perf_counter()
        summary = traffic.run(str(path), str(out / "traffic"), options.master)
        spent = time.perf_counter() - started
        events = sum(q["published"] for q in summary["queues"])
        rate = events * 2 / spent
        print(f"traffic:  {spent:.1f} s (Spark start included), {rate:,.0f} event rows/s")

        started = time.perf_counter()
        result = backtest.run(str(path), str(out / "backtest"), *MATCH, FILTER, options.master)
        spark_seconds = time.perf_counter() - started
        rate = result["examined"] / spark_seconds
        taken = f"{result['taken']:,} of {result['examined']:,} taken"
        print(f"backtest: {taken} in {spark_seconds:.1f} s: {rate:,.0f} rows/s")

        examined, taken, python_seconds = python_backtest(path)
        assert (examined, taken) == (result["examined"], result["taken"]), "answers differ"
        rate = examined / python_seconds
        print(f"python:   the same in one process in {python_seconds:.1f} s: {rate:,.0f} rows/s")
        print(f"ratio:    Spark is {python_seconds / spark_seconds:.1f}x the single process")
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
