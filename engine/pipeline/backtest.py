"""The selector backtest: how many archived messages a proposed WHEN would have taken.

Theory of operation: the WHEN (match operator + pattern, and/or a filter expression) is
checked by the engine's own parser before Spark starts (a mistake raises InvalidSelector
with its column), then translated into one Spark SQL column (translate.py) and evaluated
over the archived history in the JVM. One aggregation gives the counts per queue and per
hour; the 20 sample mids are the first taken ones the scan finds, in time order.

Outputs under `out`: `by_hour/` and `by_queue/` (Parquet) and `summary.json`:

    {"when": "...", "examined": N, "taken": N,
     "by_queue": [{"queue", "examined", "taken"}], "by_hour": [{"hour", "queue", "taken"}],
     "samples": [mid, ...], "seconds": S}

`hour` is the UTC hour as "YYYY-MM-DDTHH:00:00Z".
"""

from __future__ import annotations

import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from engine.errors import XumpError
from engine.pipeline.spark import (
    Progress,
    arguments,
    check_window,
    print_error,
    read_archive,
    report,
    run_when_job,
    session,
    write_summary,
)
from engine.pipeline.translate import When, parse_when, when_column

SAMPLES = 20


BY_HOUR = pa.schema(
    [("hour", pa.string()), ("queue", pa.string()), ("examined", pa.int64()), ("taken", pa.int64())]
)
BY_QUEUE = pa.schema([("queue", pa.string()), ("examined", pa.int64()), ("taken", pa.int64())])


def _hour(index: int) -> str:
    return datetime.fromtimestamp(index * 3600, UTC).strftime("%Y-%m-%dT%H:00:00Z")


def _write_table(rows: list[dict[str, Any]], schema: pa.Schema, target: Path) -> None:
    """A small result, already in this process, as a Parquet directory of one file."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), target / "part-00000.parquet")


def taken(frame: DataFrame, when: When) -> DataFrame:
    """The history rows the WHEN takes."""
    return frame.where(when_column(when))


def run(
    archive: str,
    out: str,
    match_operator: str | None = None,
    pattern: str | None = None,
    filter: str | None = None,
    master: str | None = None,
    since: float | None = None,
    until: float | None = None,
    queues: list[str] | None = None,
    *,
    field: str = "address",
    progress: Progress = None,
) -> dict[str, Any]:
    """Run the backtest; returns the summary (also written to `out`/summary.json)."""
    when = parse_when(match_operator, pattern, filter, field)
    check_window(archive, out, since, until, queues)
    started = time.monotonic()
    report(progress, "starting Spark")
    spark = session(master)
    report(progress, "reading the archive")
    history = read_archive(spark, archive, "history", since, until, queues)
    # One pass counts per hour and queue; a second finds the earliest taken (only the
    # taken rows reach its sort, which keeps just SAMPLES of them).
    marked = history.select(
        "mid",
        "queue",
        "timestamp",
        F.floor(F.col("timestamp") / 3600).cast("long").alias("hour_index"),
        when_column(when).alias("taken"),
    )
    report(progress, "counting")
    counted = (
        marked.groupBy("hour_index", "queue")
        .agg(
            F.count(F.lit(1)).alias("examined"),
            F.sum(F.col("taken").cast("long")).alias("taken"),
        )
        .collect()
    )
    hours = sorted(
        (
            {
                "hour": _hour(row["hour_index"]),
                "queue": row["queue"],
                "examined": row["examined"],
                "taken": row["taken"],
            }
            for row in counted
        ),
        key=lambda row: (row["hour"], row["queue"]),
    )
    report(progress, "sampling")
    # Any SAMPLES taken messages will do: a LIMIT without an order stops reading as soon
    # as it has them (usually within the first file), where ordering would read everything.
    found = marked.where("taken").select("mid", "timestamp").limit(SAMPLES).collect()
    samples = [row.mid for row in sorted(found, key=lambda row: (row.timestamp, row.mid))]
    report(progress, "writing the outputs")
    queues_seen: dict[str, dict[str, Any]] = {}
    for row in hours:
        entry = queues_seen.setdefault(
            row["queue"], {"queue": row["queue"], "examined": 0, "taken": 0}
        )
        entry["examined"] += row["examined"]
        entry["taken"] += row["taken"]
    by_queue = sorted(queues_seen.values(), key=lambda entry: entry["queue"])
    directory = Path(out)
    _write_table(hours, BY_HOUR, directory / "by_hour")
    _write_table(by_queue, BY_QUEUE, directory / "by_queue")
    summary = {
        "job": "backtest",
        "when": when.describe(),
        "since": since,
        "until": until,
        "queues": queues,
        "examined": sum(entry["examined"] for entry in by_queue),
        "taken": sum(entry["taken"] for entry in by_queue),
        "by_queue": by_queue,
        "by_hour": [
            {"hour": row["hour"], "queue": row["queue"], "taken": row["taken"]}
            for row in hours
            if row["taken"]
        ],
        "samples": samples,
        "seconds": round(time.monotonic() - started, 3),
    }
    write_summary(directory, summary)
    report(progress, "done")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = arguments("Selector backtest: what a WHEN would have taken.", when=True)
    options = parser.parse_args(argv)
    try:
        summary = run_when_job(run, options)
    except XumpError as error:
        print_error(error)
        return 2
    print(f"{summary['taken']} of {summary['examined']} messages taken ({summary['when']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
