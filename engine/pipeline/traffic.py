"""The traffic report: what the journal says happened, per queue, selector and minute.

Theory of operation: one pass over the archived journal events (engine/archive.py) counts,
per (queue, selector, minute): `published` (publish events; they have no selector),
`delivered` (deliver events, redeliveries included), `confirmed`, `rejected` and
`dead_lettered`; dead letters are also counted per reason (the event's detail: unroutable,
rejected, overflow, no-such-queue, ...). Latency is publish-to-confirm: each confirm event
joined with the publish event of the same mid (a message keeps its mid through copies and
moves), attributed to the queue where it was confirmed; p50/p90/p99 are Spark's
percentile_approx (relative error below 1/10,000). Top addresses count publish events.

Outputs under `out`:

    by_minute/       queue, selector, minute (UTC, "YYYY-MM-DDTHH:MM:00Z"), published,
                     delivered, confirmed, rejected, dead_lettered
    dead_letters/    queue, reason, dead_lettered
    latency/         queue, confirmed, p50, p90, p99, mean (seconds)
    top_addresses/   address, published (the TOP_ADDRESSES most published)
    summary.json     the same, with per-queue totals and the per-minute series per queue
                     (at most SERIES_LIMIT points, the latest) for the console's charts
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from engine.pipeline.spark import (
    Progress,
    arguments,
    read_archive,
    report,
    run_job,
    start,
    write_summary,
)

TOP_ADDRESSES = 20
BROADCAST_CONFIRMS = 1_000_000
SERIES_LIMIT = 5_000
COUNTED = {
    "published": "publish",
    "delivered": "deliver",
    "confirmed": "confirm",
    "rejected": "reject",
    "dead_lettered": "dead_letter",
}


LATENCY_SCHEMA = "queue string, confirmed long, p50 double, p90 double, p99 double, mean double"


def _write_rows(spark: SparkSession, rows: list, schema: str, target: Path) -> None:
    """A small collected result as one Parquet file (no second pass over the events)."""
    frame = spark.createDataFrame([tuple(row) for row in rows], schema)
    frame.coalesce(1).write.mode("overwrite").parquet(str(target))


def run(
    archive: str,
    out: str,
    master: str | None = None,
    since: float | None = None,
    until: float | None = None,
    queues: list[str] | None = None,
    *,
    progress: Progress = None,
) -> dict[str, Any]:
    """Compute the report; returns the summary (also written to `out`/summary.json)."""
    started = time.monotonic()
    spark = start(archive, out, master, since, until, queues, progress)
    report(progress, "reading the archive")
    events = read_archive(spark, archive, "events", since, until, queues).where(
        F.col("kind").isin(list(COUNTED.values()))
    )
    directory = Path(out)
    # One pass over the events counts everything per (queue, selector, minute, kind,
    # reason); the per-minute table, dead-letter reasons and totals come from that small
    # result. Latency and top addresses need a pass of their own each.
    report(progress, "counting per minute")
    counts = (
        events.groupBy(
            "queue",
            "selector",
            F.floor(F.col("time") / 60).cast("long").alias("minute_index"),
            "kind",
            F.when(F.col("kind") == "dead_letter", F.col("detail")).alias("reason"),
        )
        .agg(F.count(F.lit(1)).alias("n"))
        .cache()
    )
    try:
        minute = F.date_format(
            F.timestamp_seconds(F.col("minute_index") * 60), "yyyy-MM-dd'T'HH:mm:00'Z'"
        )
        by_minute = (
            counts.groupBy("queue", "selector", "minute_index")
            .agg(
                *[
                    F.sum(F.when(F.col("kind") == kind, F.col("n")).otherwise(0)).alias(name)
                    for name, kind in COUNTED.items()
                ]
            )
            .select("queue", "selector", minute.alias("minute"), *COUNTED)
            .orderBy("queue", "selector", "minute")
            .cache()
        )
        by_minute.coalesce(1).write.mode("overwrite").parquet(str(directory / "by_minute"))
        per_queue_minute = (
            by_minute.groupBy("queue", "minute")
            .agg(*[F.sum(name).alias(name) for name in COUNTED])
            .orderBy(F.col("minute").desc(), "queue")
            .limit(SERIES_LIMIT)
            .collect()
        )
        totals = (
            by_minute.groupBy("queue")
            .agg(*[F.sum(name).alias(name) for name in COUNTED])
            .orderBy("queue")
            .collect()
        )
        by_minute.unpersist()

        report(progress, "dead-letter reasons")
        dead_letters = (
            counts.where(F.col("kind") == "dead_letter")
            .groupBy("queue", "reason")
            .agg(F.sum("n").alias("dead_lettered"))
            .orderBy("queue", "reason")
        )
        dead_letters.coalesce(1).write.mode("overwrite").parquet(str(directory / "dead_letters"))
        reasons = dead_letters.collect()
    finally:
        counts.unpersist()

    report(progress, "latency")
    # publish-to-confirm: each confirm joined with the publish event of its mid. When the
    # confirms are few enough to broadcast, the publish events are streamed past them
    # instead of both sides being shuffled by mid.
    confirms = events.where(F.col("kind") == "confirm").select("mid", "queue", "time")
    confirmed = confirms.count()
    if confirmed <= BROADCAST_CONFIRMS:
        confirms = F.broadcast(confirms)
    published = events.where(F.col("kind") == "publish").select(
        "mid", F.col("time").alias("published_at")
    )
    waits = confirms.join(published, "mid").select(
        "queue", (F.col("time") - F.col("published_at")).alias("latency")
    )
    latency = (
        waits.groupBy("queue")
        .agg(
            F.count(F.lit(1)).alias("confirmed"),
            F.percentile_approx("latency", [0.5, 0.9, 0.99], 10_000).alias("p"),
            F.avg("latency").alias("mean"),
        )
        .select(
            "queue",
            "confirmed",
            F.col("p")[0].alias("p50"),
            F.col("p")[1].alias("p90"),
            F.col("p")[2].alias("p99"),
            "mean",
        )
        .orderBy("queue")
    )
    latencies = latency.collect() if confirmed else []
    _write_rows(spark, latencies, LATENCY_SCHEMA, directory / "latency")

    report(progress, "top addresses")
    addresses = (
        events.where(F.col("kind") == "publish")
        .groupBy("address")
        .agg(F.count(F.lit(1)).alias("published"))
        .orderBy(F.col("published").desc(), "address")
        .limit(TOP_ADDRESSES)
        .collect()
    )
    _write_rows(spark, addresses, "address string, published long", directory / "top_addresses")

    report(progress, "writing the summary")
    queues_out: dict[str, dict[str, Any]] = {}
    for row in totals:
        entry = {name: row[name] for name in COUNTED}
        entry.update(queue=row["queue"], dead_letter_reasons={}, latency=None, series=[])
        queues_out[row["queue"]] = entry
    for row in reasons:
        queues_out[row["queue"]]["dead_letter_reasons"][row["reason"]] = row["dead_lettered"]
    for row in latencies:
        queues_out[row["queue"]]["latency"] = {
            "confirmed": row["confirmed"],
            "p50": row["p50"],
            "p90": row["p90"],
            "p99": row["p99"],
            "mean": row["mean"],
        }
    for row in reversed(per_queue_minute):  # oldest first
        queues_out[row["queue"]]["series"].append(
            {"minute": row["minute"], **{name: row[name] for name in COUNTED}}
        )
    summary = {
        "job": "traffic",
        "since": since,
        "until": until,
        "queues": list(queues_out.values()),
        "totals": {name: sum(q[name] for q in queues_out.values()) for name in COUNTED},
        "top_addresses": [
            {"address": row["address"], "published": row["published"]} for row in addresses
        ],
        "series_truncated": len(per_queue_minute) >= SERIES_LIMIT,
        "seconds": round(time.monotonic() - started, 3),
    }
    write_summary(directory, summary)
    report(progress, "done")
    return summary


def main(argv: list[str] | None = None) -> int:
    options = arguments("Traffic report over the archived journal events.").parse_args(argv)
    summary = run_job(run, options)
    if summary is None:
        return 2
    totals = summary["totals"]
    print(
        f"{len(summary['queues'])} queues: {totals['published']} published, "
        f"{totals['delivered']} delivered, {totals['confirmed']} confirmed, "
        f"{totals['dead_lettered']} dead-lettered; outputs in {options.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
