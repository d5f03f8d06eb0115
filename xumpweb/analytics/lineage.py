"""A message's lineage in the service (SPEC §12): its journal events, wherever they are now.

The router's engine records events (engine/event_journal.py) and, after every routing step,
appends them to the store's journal list in Redis (journal.py); the archive export moves
them from there into Parquet (engine/archive.py). So a message's events are in the list
(recent), in the archive (older), or briefly in both (written, not yet removed from the
list): both are read and each event is kept once, by its (epoch, position).

Events of one journal epoch (one router's engine) are in recording order by position, which
is the order things happened (their times come from two clocks: a call's start and each
delivery's moment, so times alone may disagree with it). Epochs, routers one after another
or the routers of shards side by side (a message that crosses shards and comes back has
events in each, interleaved), are merged by time, each kept in its own order.
"""

from __future__ import annotations

import heapq
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from engine.archive import Archive
from engine.lineage import check_mid, step_of
from xumpweb.analytics.journal import chunk_events, journal_key
from xumpweb.runtime import Service

READ = 100  # journal chunks per Redis read (a chunk is one routing step's events)
# the newest part of the journal list a trace reads, in bytes (about 500,000 events): a
# journal the archive has not emptied for long can hold millions, and one trace must not
# pull them all out of Redis. Bounded in bytes, not chunks: a router writes a chunk a step,
# and a step may hold one event as well as thousands
MOST_BYTES = 64 * 1024 * 1024


def trace(
    service: Service, mid: str, archive: Path | None, most: int = MOST_BYTES
) -> list[dict[str, Any]]:
    """Every recorded step of message `mid`, oldest first, each with `epoch` and `position`
    and the `source` it was read from ("journal" or "archive"). [] when none is known.
    Reads the journal list from its newest chunk back, `most` bytes of it on each shard
    (steps older than those and not yet archived are left out)."""
    check_mid(mid)
    found: dict[tuple[str, int], tuple[tuple, str]] = {}
    if archive is not None and archive.is_dir():
        for epoch, position, event in Archive(archive).events_of(mid):
            found[(epoch, position)] = (event, "archive")
    needle = orjson.dumps(mid)  # the mid as the chunk's JSON spells it
    # ... and where a record's mid stands in a chunk of flat fields: after its site (a list),
    # so a mid spelled like a kind or a queue ("publish") does not have every chunk parsed
    placed = b"]," + needle + b","
    for shard in service.shards.values():  # a message's steps on every shard it crossed
        client = shard.redis
        key = journal_key(shard.store)
        end, read = -1, 0  # newest first, READ chunks a round trip
        while read < most:
            items = client.lrange(key, end - READ + 1, end)
            for item in items:
                read += len(item)
                if needle not in item or (b'"fields"' in item and placed not in item):
                    continue  # most chunks: no JSON parse at all
                chunk = orjson.loads(item)
                epoch, first = chunk["epoch"], chunk["first"]
                for offset, event in enumerate(chunk_events(chunk)):
                    if event[2] == mid:
                        found[(epoch, first + offset)] = (event, "journal")
            if len(items) < READ:
                break  # the list's oldest chunk was read
            end -= READ
    # each epoch's events in position order, the epochs merged by time (see the module doc)
    epochs: dict[str, list[tuple[float, str, int, tuple, str]]] = {}
    for (epoch, position), (event, source) in sorted(found.items()):
        epochs.setdefault(epoch, []).append((event[0], epoch, position, event, source))
    steps = []
    for _, epoch, position, event, source in heapq.merge(*epochs.values(), key=itemgetter(0)):
        step = step_of(event)
        step.update({"epoch": epoch, "position": position, "source": source})
        steps.append(step)
    return steps
