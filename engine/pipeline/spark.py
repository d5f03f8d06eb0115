"""The SparkSession the jobs share, the archive as DataFrames, and the jobs' common options.

Theory of operation: `session(master)` returns the process's SparkSession, building it on
first use: `local[*]` unless a master URL is given (`spark://host:7077`, `yarn`, ...), no
web UI, Spark's own logging at ERROR (log4j2.properties beside this file), UTC, ANSI mode
off (the translation guards zero divisors itself and integer overflow wraps rather than
failing a job), partition values read as strings (a queue named `2024` stays a string),
and few shuffle partitions when local. The SQL settings are applied to an existing session
too, so a test's shared session behaves like a job's own.

`read_archive` reads a table of the archive (engine/archive.py: `history` or `events`) with
its partitions (`date`, `queue`) as columns, restricted to a time window and queues, pruning
partitions by date and queue before any file is opened; an archive with nothing yet reads as
empty.

Every job opens with `start` (its window checked, then Spark started); the WHEN jobs
(backtest.run, replay.select) are made by `when_job`, which holds their one list of
arguments and their opening, from the part that is each job's own; `run_job` calls a job
with a command line's options (`arguments`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from engine.archive import EVENTS_SCHEMA, HISTORY_SCHEMA
from engine.errors import InvalidArgument, XumpError
from engine.pipeline.translate import When, parse_when

Progress = Callable[[str], None] | None
R = TypeVar("R")

_LOG4J = Path(__file__).with_name("log4j2.properties")

_SQL_SETTINGS = {
    "spark.sql.ansi.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.parquet.enableVectorizedReader": "true",
}


def _with_partitions(schema: pa.Schema) -> T.StructType:
    """An archive table's Parquet schema as Spark reads it: its partitions (`date`, `queue`)
    become columns too."""
    partitions = [T.StructField("date", T.StringType()), T.StructField("queue", T.StringType())]
    return T.StructType(from_arrow_schema(schema).fields + partitions)


HISTORY = _with_partitions(HISTORY_SCHEMA)
EVENTS = _with_partitions(EVENTS_SCHEMA)


def session(master: str | None = None, app: str = "xump-pipeline") -> SparkSession:
    """The SparkSession for the jobs (see the module docstring)."""
    master = master or os.environ.get("XUMP_SPARK_MASTER") or "local[*]"
    local = master.startswith("local")
    java_options = f"-Dlog4j2.configurationFile=file:{_LOG4J}"
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
    )
    if local:
        builder = builder.config("spark.sql.shuffle.partitions", str(max(2, os.cpu_count() or 2)))
        builder = builder.config(
            "spark.driver.memory", os.environ.get("XUMP_SPARK_DRIVER_MEMORY", "2g")
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for key, value in _SQL_SETTINGS.items():
        spark.conf.set(key, value)
    return spark


def _has_parquet(root: Path) -> bool:
    return root.is_dir() and any(root.glob("date=*/queue=*/*.parquet"))


def _day(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d")


def _window(
    frame: DataFrame,
    time_column: str,
    since: float | None,
    until: float | None,
    queues: list[str] | None,
) -> DataFrame:
    conditions: list[Column] = []
    if since is not None:
        conditions += [F.col("date") >= _day(since), F.col(time_column) >= since]
    if until is not None:
        conditions += [F.col("date") <= _day(until), F.col(time_column) < until]
    if queues is not None:
        conditions.append(F.col("queue").isin(list(queues)))
    for condition in conditions:
        frame = frame.where(condition)
    return frame


def _read(spark: SparkSession, root: Path, schema: T.StructType) -> DataFrame:
    if not _has_parquet(root):
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("basePath", str(root)).parquet(str(root))


# the archive's tables: table -> (its schema, the column its window is on)
TABLES = {"history": (HISTORY, "timestamp"), "events": (EVENTS, "time")}


def read_archive(
    spark: SparkSession,
    archive: str | Path,
    table: str,
    since: float | None = None,
    until: float | None = None,
    queues: list[str] | None = None,
) -> DataFrame:
    """The rows of one of the archive's TABLES in the window: "history" (history rows,
    archive.HISTORY_SCHEMA + date, queue) or "events" (journal events, archive.EVENTS_SCHEMA
    + date, queue)."""
    schema, time_column = TABLES[table]
    frame = _read(spark, Path(archive) / table, schema)
    return _window(frame, time_column, since, until, queues)


# -- checks and options shared by the jobs --------------------------------------------------
def check_window(
    archive: str | Path,
    out: str | Path,
    since: float | None,
    until: float | None,
    queues: list[str] | None,
) -> None:
    """InvalidArgument, before Spark starts, for options that cannot work."""
    if not isinstance(archive, str | Path) or not str(archive):
        raise InvalidArgument(f"archive must be a path, not {archive!r}")
    if not Path(archive).is_dir():
        raise InvalidArgument(f"no archive at {str(archive)!r}")
    if not isinstance(out, str | Path) or not str(out):
        raise InvalidArgument(f"out must be a path, not {out!r}")
    for name, seconds in (("since", since), ("until", until)):
        if seconds is not None and (
            not isinstance(seconds, int | float)
            or isinstance(seconds, bool)
            or not math.isfinite(seconds)
        ):
            raise InvalidArgument(f"{name} must be seconds since the epoch, not {seconds!r}")
    if since is not None and until is not None and until <= since:
        raise InvalidArgument("until must come after since")
    if queues is not None and (
        isinstance(queues, str) or not all(isinstance(q, str) and q for q in queues)
    ):
        raise InvalidArgument(f"queues must be a list of queue names, not {queues!r}")


def report(progress: Progress, stage: str) -> None:
    if progress is not None:
        progress(stage)


def start(
    archive: str | Path,
    out: str | Path,
    master: str | None,
    since: float | None,
    until: float | None,
    queues: list[str] | None,
    progress: Progress,
) -> SparkSession:
    """Every job's opening: its window checked (before Spark starts), then Spark started."""
    check_window(archive, out, since, until, queues)
    report(progress, "starting Spark")
    return session(master)


@dataclass(frozen=True, slots=True)
class WhenJob:
    """What `when_job` hands a WHEN job's own part: the WHEN, the window's history rows (not
    read yet: Spark reads them when the part asks for a result), the output directory, the
    window itself, when the job started (time.monotonic()) and where progress goes."""

    when: When
    history: DataFrame
    out: Path
    since: float | None
    until: float | None
    queues: list[str] | None
    started: float
    progress: Progress


def when_job(own: Callable[[WhenJob], R]) -> Callable[..., R]:
    """A WHEN job (backtest.run, replay.select) made from its own part `own`. Both take the
    same arguments (docs/pipeline.md) and open the same way, here: the WHEN parsed by the
    engine's parser (a mistake raises InvalidSelector, with its column, before Spark
    starts), the window checked, Spark started, the window's history rows; `own` does the
    rest."""

    def job(
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
    ) -> R:
        when = parse_when(match_operator, pattern, filter, field)
        started = time.monotonic()
        spark = start(archive, out, master, since, until, queues, progress)
        history = read_archive(spark, archive, "history", since, until, queues)
        return own(WhenJob(when, history, Path(out), since, until, queues, started, progress))

    job.__name__ = job.__qualname__ = own.__name__.lstrip("_")
    job.__doc__, job.__module__ = own.__doc__, own.__module__
    return job


def write_summary(out: str | Path, summary: dict[str, Any]) -> None:
    """summary.json under `out`, written atomically."""
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / ".summary.json.tmp"
    temporary.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str))
    os.replace(temporary, directory / "summary.json")


def seconds(text: str) -> float:
    """A command-line time: seconds since the epoch, or an ISO 8601 date/time (UTC if no
    zone is given)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither seconds since the epoch nor an ISO 8601 time"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def arguments(description: str, when: bool = False) -> argparse.ArgumentParser:
    """The options every job takes; with `when`, a WHEN's too (backtest, replay)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--archive", required=True, help="the archive directory")
    parser.add_argument("--out", required=True, help="the directory for the outputs")
    parser.add_argument("--master", help="Spark master URL (default local[*])")
    parser.add_argument("--since", type=seconds, help="from this time (epoch seconds or ISO)")
    parser.add_argument("--until", type=seconds, help="before this time")
    parser.add_argument(
        "--queue", action="append", dest="queues", help="only this queue (repeatable)"
    )
    if when:
        parser.add_argument("--match", dest="match_operator", help="eq, topic, prefix or regex")
        parser.add_argument("--pattern", help="the match pattern")
        parser.add_argument("--field", default="address", help="match on this header")
        parser.add_argument("--filter", help="a JMS / SQL-92 filter expression")
    return parser


def run_job(job: Callable[..., R], options: argparse.Namespace) -> R | None:
    """Call a job (traffic.run, backtest.run, replay.select) with a command line's options
    (`arguments`: they are named as the job's parameters); its answer, or None when it
    refused them (the reason on standard error: the command then exits with status 2)."""
    given = vars(options).copy()
    try:
        return job(given.pop("archive"), given.pop("out"), progress=print_progress, **given)
    except XumpError as error:
        print_error(error)
        return None


def print_error(error: Exception) -> None:
    """A job's refusal on standard error, with the column of a bad expression."""
    column = getattr(error, "column", None)
    where = f" (column {column})" if column is not None and "column" not in str(error) else ""
    print(f"error: {error}{where}", file=sys.stderr)


def print_progress(stage: str) -> None:
    print(f"... {stage}", flush=True)
