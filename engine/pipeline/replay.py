"""Replay selection: the archived messages a WHEN takes, written out for re-publishing.

Theory of operation: `select()` runs the backtest's translation (translate.py) over the
archived history and writes what a publisher needs, oldest first, as Parquet under `out`:
`queue`, `seq`, `mid` (where it came from), `timestamp`, `address`, `return_address`, the
typed header maps and `body` (engine/archive.py's columns). Spark selects; it does not
publish. `read_batches(path, size)` reads that output with pyarrow alone, in order, and
yields lists of engine Messages with their headers' kinds restored and no mid, timestamp or
seq (the engine gives the re-published copies their own), for a Celery task to publish
into the chosen queue in batches.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds

from engine.archive import headers_of
from engine.errors import InvalidArgument
from engine.message import Message
from engine.pipeline.spark import WhenJob, arguments, report, run_job, when_job
from engine.pipeline.translate import when_column

COLUMNS = [
    "queue",
    "seq",
    "mid",
    "timestamp",
    "address",
    "return_address",
    "headers_str",
    "headers_int",
    "headers_float",
    "headers_bool",
    "headers_bigint",
    "body",
]


def _select(job: WhenJob) -> str:
    """Write the selected messages under `out`/messages; returns that path."""
    report(job.progress, "selecting")
    target = job.out / "messages"
    (
        job.history.where(when_column(job.when))
        .select(*COLUMNS)
        .orderBy("timestamp", "queue", "seq")
        .write.mode("overwrite")
        .parquet(str(target))
    )
    report(job.progress, "done")
    return str(target)


# select(archive, out, match_operator, pattern, filter, master, since, until, queues, *,
# field, progress): every WHEN job's arguments (spark.when_job)
select = when_job(_select)


def read_batches(path: str | Path, size: int = 1000) -> Iterator[list[Message]]:
    """The selected messages, oldest first, `size` at a time, as Messages to publish."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise InvalidArgument(f"size must be a positive count, not {size!r}")
    if not Path(path).is_dir():
        raise InvalidArgument(f"no replay selection at {str(path)!r}")
    files = sorted(str(p) for p in Path(path).glob("part-*.parquet"))  # Spark's sorted parts
    if not files:
        return
    dataset = ds.dataset(files, format="parquet")
    batch: list[Message] = []
    for record_batch in dataset.to_batches(columns=COLUMNS[4:], batch_size=size):
        for row in record_batch.to_pylist():
            batch.append(
                Message(
                    address=row["address"],
                    headers=headers_of(row),
                    body=row["body"],
                    return_address=row["return_address"],
                )
            )
            if len(batch) == size:
                yield batch
                batch = []
    if batch:
        yield batch


def main(argv: list[str] | None = None) -> int:
    options = arguments("Select archived messages for a replay.", when=True).parse_args(argv)
    path = run_job(select, options)
    if path is None:
        return 2
    count = sum(len(batch) for batch in read_batches(path, 10_000))
    print(f"{count} messages selected into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
