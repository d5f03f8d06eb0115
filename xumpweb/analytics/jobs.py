"""What an AnalyticsRun does, run by its Celery task (tasks.py) inside a worker.

Theory of operation. Tasks are acknowledged late, so a run's task can arrive twice: after
its worker died (it must run again) or because the broker's visibility timeout passed
while a long Spark job was still going (it must not). A run therefore holds a claim in
Redis while it works (`xump:{S}:analytics:run:<id>`, renewed every few seconds by a thread,
gone soon after its holder dies); a task that finds the claim held, or the run ended, does
nothing.

Spark jobs (engine/pipeline/) run in the worker's process in the master XUMP_SPARK_MASTER
(local[*] by default), over the archive under XUMP_ARCHIVE_DIR, writing their output under
`<archive>/_runs/<id>/` (names starting with `_` are invisible to Spark's and pyarrow's
partition discovery, so outputs never mix with the archive). A replay publishes the
messages a backtest selected, in batches through Service.publish_many, and records after
each batch how many went out, so a replay that runs again after a crash resumes there (a
batch published just before a crash may go out twice: at-least-once, like every publish).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings

from engine.errors import XumpError
from engine.message import Message
from xumpweb import runtime
from xumpweb.analytics.models import AnalyticsRun

logger = logging.getLogger("xump.analytics")

CLAIM_TTL = 30  # seconds a claim outlives its holder
REPLAY_BATCH = 500


def archive_dir() -> Path:
    return Path(settings.XUMP_ARCHIVE_DIR)


def output_dir(run: AnalyticsRun) -> Path:
    return archive_dir() / "_runs" / str(run.pk)


def execute(run_id: int) -> None:
    """Do run `run_id`'s work once, recording its status, progress, result or error."""
    run = AnalyticsRun.objects.filter(pk=run_id).first()
    if run is None or run.status in ("done", "failed"):
        return
    with Claim(run_id) as held:
        if not held:
            return  # another task is working on it
        run.refresh_from_db()
        if run.status in ("done", "failed"):
            return
        run.begin()
        try:
            result = JOBS[run.kind](run)
        except XumpError as error:
            run.fail(str(error) or type(error).__name__)
        except Exception as error:  # a job's defect ends the run, visibly, not the worker
            logger.exception("analytics run %s failed", run_id)
            run.fail(f"{type(error).__name__}: {error}")
        else:
            run.finish(_json(result))


def claimed(run_id: int) -> bool:
    """Whether a live task holds run `run_id`."""
    service = runtime.service()
    return bool(service.redis.exists(Claim.key_of(service.store, run_id)))


class Claim:
    """A run's claim in Redis, renewed by a thread while the block runs."""

    def __init__(self, run_id: int) -> None:
        service = runtime.service()
        self.client = service.redis
        self.key = self.key_of(service.store, run_id)
        self.token = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def key_of(store: str, run_id: int) -> str:
        return f"xump:{{{store}}}:analytics:run:{run_id}"

    def __enter__(self) -> bool:
        if not self.client.set(self.key, self.token, nx=True, ex=CLAIM_TTL):
            return False
        self._thread = threading.Thread(target=self._renew, daemon=True, name="analytics-claim")
        self._thread.start()
        return True

    def _renew(self) -> None:
        while not self._stop.wait(CLAIM_TTL / 3):
            self.client.expire(self.key, CLAIM_TTL)

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            if (self.client.get(self.key) or b"").decode() == self.token:
                self.client.delete(self.key)


# -- the jobs -----------------------------------------------------------------------------
def _when(parameters: dict[str, Any]) -> dict[str, Any]:
    """The time range and queues a run's parameters choose, as the pipeline takes them."""
    return {
        "since": parameters.get("since"),
        "until": parameters.get("until"),
        "queues": parameters.get("queues") or None,
    }


def _progress(run: AnalyticsRun) -> Callable[[str], None]:
    def stage(name: str) -> None:
        run.report_progress(str(name))

    return stage


def _fresh_output(run: AnalyticsRun) -> Path:
    out = output_dir(run)
    if out.exists():
        shutil.rmtree(out)  # a run started again writes its output anew
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def _archive_or_fail() -> str:
    path = archive_dir()
    if not (path / "manifest.json").exists():
        raise XumpError(
            f"there is no archive at {path} yet: run an archive export first "
            "(python manage.py xump archive, or wait for the periodic one)"
        )
    return str(path)


def _run_job(job: Callable[..., Any], run: AnalyticsRun, arguments: dict[str, Any]) -> Any:
    """`job` (a Spark job of engine/pipeline) over the archive, writing into the run's
    output directory, emptied first; the job's answer."""
    archive = _archive_or_fail()
    out = _fresh_output(run)
    return job(
        archive, str(out), master=settings.XUMP_SPARK_MASTER, progress=_progress(run),
        **arguments,
    )  # fmt: skip


def run_report(run: AnalyticsRun) -> dict[str, Any]:
    from engine.pipeline import traffic

    return _run_job(traffic.run, run, _when(run.parameters))


def _backtest_arguments(parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "match_operator": parameters.get("match_operator") or None,
        "pattern": parameters.get("pattern") or None,
        "filter": parameters.get("filter") or None,
        **_when(parameters),
    }


def run_backtest(run: AnalyticsRun) -> dict[str, Any]:
    from engine.pipeline import backtest

    return _run_job(backtest.run, run, _backtest_arguments(run.parameters))


def run_replay(run: AnalyticsRun) -> dict[str, Any]:
    from engine.pipeline import replay

    source = AnalyticsRun.objects.get(pk=run.parameters["backtest"], kind="backtest")
    target = run.parameters["queue"]
    service = runtime.service()
    if target not in service.queue_names():
        raise XumpError(f"queue {target!r} does not exist")
    _archive_or_fail()  # before anything, even a resumed replay: the archive must be there
    done = run.result or {}  # a replay started again resumes after what it published
    already = int(done.get("published", 0))
    selected = done.get("selection")
    if not selected or not Path(selected).is_dir():
        already = 0
        selected = _run_job(replay.select, run, _backtest_arguments(source.parameters))
        _save(run, {"published": 0, "queue": target, "selection": selected})
    published = skipped = 0
    started = time.monotonic()
    for batch in replay.read_batches(selected, REPLAY_BATCH):
        if skipped + len(batch) <= already:
            skipped += len(batch)
            continue
        batch = batch[max(0, already - skipped) :]
        skipped = already
        messages = [Message(m.address, m.headers, m.body, m.return_address) for m in batch]
        service.publish_many(target, messages)
        published += len(messages)
        total = already + published
        _save(run, {"published": total, "queue": target, "selection": selected},
              progress=f"published {total:,} messages into {target}")  # fmt: skip
    elapsed = max(time.monotonic() - started, 1e-6)
    return {
        "published": already + published,
        "queue": target,
        "backtest": source.pk,
        "rate": round(published / elapsed, 1),
    }


def _save(run: AnalyticsRun, result: dict[str, Any], progress: str = "") -> None:
    """A running job's partial result (what a job started again resumes from)."""
    fields: dict[str, Any] = {"result": result}
    if progress:
        fields["progress"] = progress
    AnalyticsRun.objects.filter(pk=run.pk).update(**fields)
    run.result = result


def run_archive(run: AnalyticsRun) -> dict[str, Any]:
    from xumpweb.analytics.archiving import export

    shown = [0.0]

    def progress(what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - shown[0] >= 0.5 or done == total:
            shown[0] = now
            run.report_progress(f"{what}: {done} of {total}")

    path = Path(run.parameters.get("path") or archive_dir())
    return export(runtime.service(), path, progress).as_json()


JOBS: dict[str, Callable[[AnalyticsRun], dict[str, Any]]] = {
    "report": run_report,
    "backtest": run_backtest,
    "replay": run_replay,
    "archive": run_archive,
}


def _json(result: Any) -> Any:
    """A job's answer as plain JSON (dates and paths as text)."""

    def fallback(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.isoformat()
        return str(value)

    return json.loads(json.dumps(result, default=fallback))
