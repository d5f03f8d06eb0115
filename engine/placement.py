"""Placement: which shard (store) a new queue lives in (SPEC §10).

Theory of operation: placement is decided once, when a queue is created, and kept in the
wiring (the queue's store); it is never computed again for an existing queue, so adding
shards later moves nothing (new queues use them) and a queue stays where its state is.
The rules, first that applies:

1. an explicit store (or shard) wins;
2. a name with a `:` lives with the queue named before the first `:` (a pattern's private
   queues, "orders:retry", live with their router or service queue "orders"), which is
   where that queue is or, when it does not exist yet, where rule 3 would put it;
3. any other name by a stable hash of the name over the shards: CRC-32 of its UTF-8 bytes
   (lone surrogates kept as they are), the same in every process and on every machine,
   unlike Python's own hash() of a str.

Pure: no I/O, no engine state; the caller passes where existing queues live.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

from engine.errors import InvalidArgument


def place(
    name: str,
    shards: Sequence[str],
    explicit: str | None = None,
    store_of: Callable[[str], str | None] = lambda _queue: None,
) -> str:
    """The store a new queue `name` lives in: `explicit` when given, else by the rules in
    the module doc. `store_of(queue)`: where an existing queue lives, None if it does not
    exist."""
    if explicit is not None:
        return explicit
    if not shards:
        raise InvalidArgument("placement needs at least one shard")
    owner, colon, _rest = name.partition(":")
    if colon and owner:
        found = store_of(owner)
        if found is not None:
            return found
        return shard_by_hash(owner, shards)
    return shard_by_hash(name, shards)


def shard_by_hash(name: str, shards: Sequence[str]) -> str:
    """Rule 3: the shard a stable hash of `name` picks."""
    digest = zlib.crc32(name.encode("utf-8", "surrogatepass"))
    return shards[digest % len(shards)]
