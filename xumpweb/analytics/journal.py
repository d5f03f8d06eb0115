"""The delivery journal between the router and the archive: a bounded Redis list per store.

Theory of operation. The router's engine records events (engine/event_journal.py). After
every routing step the router drains them and appends them, as compact JSON chunks of at
most CHUNK events, to `xump:{S}:journal` IN THE SAME atomic Redis step as the step's other
changes (runtime._RelayRouter), so the journal says exactly what took effect: a step that never
committed recorded nothing, and the router that applies its commands again records them
again. The list is trimmed to the newest XUMP_JOURNAL_LIMIT events (in whole chunks), so
an archive that never runs costs bounded memory; what was trimmed shows as a gap in the
positions, which the archive counts as lost events.

A chunk: {"epoch": journal id, "first": position of its first event, "width": fields a
record has, "fields": [...]}: the records' fields one after another, as the engine's journal
keeps them (RECORD_FIELDS, `width` of them a record: [time, [kind, queue, selector,
target], mid, detail, extra], see engine/event_journal.py). The router writes them as they
lie in its buffer, neither made into events of nine fields nor into one tuple a record
(making the tuples took a tenth of the router's time); readers make the events with
`chunk_events`, which also reads the chunks of earlier routers: "events": [[...], ...], a
list an event (of nine fields, or eight before delivery tags) or a record. Positions skip
what the engine's own bound dropped. The archive reads chunks from the head, writes them
(Archive.write_events skips an (epoch, position) it already holds) and only then removes
exactly those chunks, so a task that dies in between loses nothing and writes nothing
twice. (A reader older than the "fields" form cannot read it: upgrade the processes that
archive and answer traces with the routers.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from engine.event_journal import JournalBatch, widened

CHUNK = 1000  # events per list item


def journal_key(store: str) -> str:
    return f"xump:{{{store}}}:journal"


def chunks(batch: JournalBatch) -> list[bytes]:
    """A drained batch as list items, oldest first."""
    fields, width = batch.fields()
    step = CHUNK * width
    return [
        orjson.dumps({
            "epoch": batch.epoch,
            "first": batch.first + start // width,
            "width": width,
            "fields": fields[start : start + step],
        })
        for start in range(0, len(fields), step)
    ]  # fmt: skip


def chunk_events(chunk: dict) -> list[tuple]:
    """A chunk's events as tuples of every field (`widened`), whichever form it has."""
    if "fields" in chunk:
        width = chunk["width"]
        row = iter(chunk["fields"])
        return [widened(event) for event in zip(*(row,) * width, strict=True)]
    return [widened(event) for event in chunk["events"]]


def append_commands(key: str, batch: JournalBatch, limit: int) -> list[tuple]:
    """Redis commands that append `batch` to the list at `key` and keep it bounded."""
    items = chunks(batch)
    if not items:
        return []
    keep = max(1, limit // CHUNK)
    return [("RPUSH", key, *items), ("LTRIM", key, -keep, -1)]


@dataclass
class Run:
    """Consecutive chunks of one journal epoch: written with one Archive.write_events."""

    epoch: str
    first: int
    events: list[tuple]


def runs(items: list[bytes]) -> Iterator[Run]:
    """Chunks read from the list, grouped into runs of contiguous positions per epoch."""
    current: Run | None = None
    for item in items:
        chunk = orjson.loads(item)
        epoch, first = chunk["epoch"], chunk["first"]
        events = chunk_events(chunk)
        if (
            current is not None
            and current.epoch == epoch
            and (current.first + len(current.events) == first)
        ):
            current.events.extend(events)
            continue
        if current is not None:
            yield current
        current = Run(epoch, first, events)
    if current is not None:
        yield current
