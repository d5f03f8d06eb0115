"""The archive export of the service: every queue's history and the delivery journal, from
Redis (through the router) into the Parquet archive under XUMP_ARCHIVE_DIR.

History is read through the router's `browse` operation, a page at a time from the
archive's watermark for the queue (Archive.write_history skips what it holds). Journal
events are read from the store's journal list (journal.py): a few chunks at a time from
its head, written, and only then removed, so a run that dies in between loses nothing and
the next one writes nothing twice (Archive.write_events skips positions it holds).

One pass reads the journal chunks that were there when it started, so a busy router
cannot keep it going forever; what arrives meanwhile is the next pass's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.archive import Archive
from xumpweb.analytics.journal import journal_key, runs
from xumpweb.console.common import to_message
from xumpweb.runtime import Service

HISTORY_PAGE = 1000  # messages per browse call
JOURNAL_READ = 100  # journal chunks (up to 100,000 events) per read

Progress = Callable[[str, int, int], None]  # (what, done, total)


@dataclass
class ArchiveResult:
    events: int = 0  # event rows written
    events_read: int = 0  # events taken off the journal list (written before or now)
    events_lost: int = 0  # events missing from the journal (trimmed or dropped)
    history: dict[str, int] = field(default_factory=dict)  # queue -> rows written
    path: str = ""

    def as_json(self) -> dict:
        found = asdict(self)
        found["history_total"] = sum(self.history.values())
        return found


def export(service: Service, path: Path, progress: Progress | None = None) -> ArchiveResult:
    """One archive pass of the service's store into the archive at `path`."""
    archive = Archive(path)
    result = ArchiveResult(path=str(path))
    show = progress or (lambda what, done, total: None)
    export_journal(service, archive, result, show)
    queues = [queue["name"] for queue in service.call("queues")]
    for number, queue in enumerate(queues, 1):
        result.history[queue] = export_history(service, archive, queue)
        show(f"history of {queue}", number, len(queues))
    # events recorded while the history was read (the router kept routing) come along too
    export_journal(service, archive, result, show)
    return result


def export_journal(
    service: Service, archive: Archive, result: ArchiveResult, show: Progress
) -> None:
    """Every shard's journal list into the archive (each router's engine is an epoch of
    its own, so the shards' events never share positions)."""
    for shard in service.shards.values():
        _export_journal(shard, archive, result, show)


def _export_journal(
    service: Service, archive: Archive, result: ArchiveResult, show: Progress
) -> None:
    client = service.redis
    key = journal_key(service.store)
    total = client.llen(key)
    done = 0
    while done < total:
        items = client.lrange(key, 0, min(JOURNAL_READ, total - done) - 1)
        if not items:
            break
        for run in runs(items):
            # positions between what the archive holds and this run never reached the list
            result.events_lost += max(0, run.first - 1 - archive.event_watermark(run.epoch))
            result.events += archive.write_events(run.events, epoch=run.epoch, first=run.first)
            result.events_read += len(run.events)
        pipe = client.pipeline(transaction=False)
        for item in items:
            pipe.lrem(key, 1, item)  # exactly what was written, wherever trimming left it
        pipe.execute()
        done += len(items)
        show("journal", done, total)


def export_history(service: Service, archive: Archive, queue: str) -> int:
    written = 0
    after = archive.history_watermark(queue)
    if after:  # a queue deleted and made again starts from seq 1: a new generation
        newest = service.call("browse", queue=queue, start="latest", count=1)
        at_mark = service.call("browse", queue=queue, after=after - 1, count=1)
        at_mark = [m for m in at_mark if m["seq"] == after]
        if archive.history_restarted(
            queue,
            to_message(newest[0]) if newest else None,
            to_message(at_mark[0]) if at_mark else None,
        ):
            archive.restart_history(queue)
            after = 0
    while True:
        page = service.call("browse", queue=queue, after=after, count=HISTORY_PAGE)
        if not page:
            return written
        written += archive.write_history(queue, [to_message(m) for m in page])
        after = page[-1]["seq"]
