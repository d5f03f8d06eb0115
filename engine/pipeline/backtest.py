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

from engine.pipeline.spark import WhenJob, arguments, report, run_job, when_job, write_summary
from engine.pipeline.translate import When, when_column

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


def _run(job: WhenJob) -> dict[str, Any]:
    """Run the backtest; returns the summary (also written to `out`/summary.json)."""
    when, history, progress = job.when, job.history, job.progress
    report(progress, "reading the archive")
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
    directory = job.out
    _write_table(hours, BY_HOUR, directory / "by_hour")
    _write_table(by_queue, BY_QUEUE, directory / "by_queue")
    summary = {
        "job": "backtest",
        "when": when.describe(),
        "since": job.since,
        "until": job.until,
        "queues": job.queues,
        "examined": sum(entry["examined"] for entry in by_queue),
        "taken": sum(entry["taken"] for entry in by_queue),
        "by_queue": by_queue,
        "by_hour": [
            {"hour": row["hour"], "queue": row["queue"], "taken": row["taken"]}
            for row in hours
            if row["taken"]
        ],
        "samples": samples,
        "seconds": round(time.monotonic() - job.started, 3),
    }
    write_summary(directory, summary)
    report(progress, "done")
    return summary


# run(archive, out, match_operator, pattern, filter, master, since, until, queues, *, field,
# progress): every WHEN job's arguments (spark.when_job)
run = when_job(_run)


def main(argv: list[str] | None = None) -> int:
    parser = arguments("Selector backtest: what a WHEN would have taken.", when=True)
    summary = run_job(run, parser.parse_args(argv))
    if summary is None:
        return 2
    print(f"{summary['taken']} of {summary['examined']} messages taken ({summary['when']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
