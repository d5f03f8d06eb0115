"""Crossing shards (SPEC §10, docs/scaling.md): queues that live in another shard's engine.

An engine routes one shard's queues. For every queue of another shard it may hold a
*remote stand-in* (`set_remote_queues`): a name and the shard it lives on, with no state.
Selectors, dead-letter queues and envelope targets may name a stand-in as they name any
queue. A message that arrives at a stand-in is not routed here: the engine records a
`Forward` (the target shard and queue, the message, the queues it visited in this routing,
for a MOVE the origin to settle, its delivery count), which the caller takes after the
call (`take_forwards`) and carries to the target shard's engine, exactly once
(engine/relay/router.py). There `arrive_forwarded` makes it arrive, with the queues it
visited counted as visited (loop protection crosses shards), and with its origin kept as
a *remote origin*: when that entry leaves its queue, the engine records a `Settle` for the
origin's shard instead of settling a local selector; carried back the same way,
`settle_forwarded` settles the MOVE's outstanding entry there, so credit flows up a chain
of MOVEs across shards as it does within one engine.

A MOVE into a stand-in keeps its entry outstanding at the selector, with `downstream`
naming the remote queue: deleting the selector or recalling work never puts back a
message another shard now holds (it is settled as processed there instead).

A destination's *home* (the shard its subscribers read) is the shard of the queue of its
name, else the home the caller recorded for it (`set_destination_homes`: the service keeps
each destination's home from the first DELIVER to it, so adding shards moves none), else
where placement would put a queue of that name.

Every method runs under the engine lock through the rules' `_run`, as every public call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from engine.errors import AlreadyExists, InvalidArgument
from engine.message import Delivery, Message
from engine.placement import place
from engine.routing_table import SelectorRuntime
from engine.rules import Rules
from engine.validation import check_name

# A remote origin, as an entry's origin names it: "$remote", the shard, the queue, joined
# by a control character no name may hold (validation.py), so it is never a queue's name
# and the stores keep it as they keep any origin.
REMOTE = "$remote\x1f"
_SEP = "\x1f"


class Forward(NamedTuple):
    """A message for a queue of another shard (see the module doc)."""

    shard: str
    queue: str
    message: Message
    visited: tuple[str, ...]  # queues it arrived at in the routing that sent it
    origin: tuple[str, int, str] | None  # the MOVE's (queue, selector id, tag) here
    delivery_count: int


class Settle(NamedTuple):
    """An entry that came from another shard's MOVE left its queue: settle it there."""

    shard: str
    origin: tuple[str, int, str]  # the MOVE's (queue, selector id, tag) on that shard


class RemoteQueue:
    """A stand-in for a queue of another shard: what a selector's target needs to be."""

    __slots__ = ("name", "remote")

    deleted = False
    selectors: Mapping[int, SelectorRuntime] = {}

    def __init__(self, name: str, shard: str) -> None:
        self.name = name
        self.remote = shard  # QueueRuntime.remote is None: local


def remote_origin(shard: str, origin: tuple[str, int, str]) -> tuple[str, int, str]:
    """`origin` (on `shard`) as an entry of this engine keeps it."""
    return (f"{REMOTE}{shard}{_SEP}{origin[0]}", origin[1], origin[2])


def split_remote(name: str) -> tuple[str, str] | None:
    """(shard, queue) of a remote origin's name; None for a local queue's name."""
    if not name.startswith(REMOTE):
        return None
    shard, _, queue = name[len(REMOTE) :].partition(_SEP)
    return shard, queue


class Forwarding(Rules):
    """Remote queues, forwards and settles, as methods the Engine inherits."""

    _lock: Any
    _targeted_by: dict[str, set[SelectorRuntime]]
    _remote: dict[str, RemoteQueue]
    _forwards: list[Forward]
    _settles: list[Settle]
    _shards: tuple[str, ...]
    _queues: dict
    _local_shard: str | None = None
    _store_of: Any  # core.py: the store of a local queue or a stand-in
    _homes: Mapping[str, str] = {}  # set_destination_homes: destination -> its shard

    def set_remote_queues(self, queues: Mapping[str, str]) -> None:
        """The queues of other shards, name -> shard; each call replaces the last. A name
        that is a queue of this engine is refused (AlreadyExists), as is a bad name."""
        with self._lock:
            for name, shard in queues.items():
                check_name("remote queue", name, allow_reserved=True)
                check_name("shard", shard)
                if name in self._queues:
                    raise AlreadyExists(
                        f"queue {name!r} is a queue of this shard, not of shard {shard!r}"
                    )
            before = set(self._remote)
            self._remote = {name: RemoteQueue(name, shard) for name, shard in queues.items()}
            for name in before | set(self._remote):
                found = self._remote.get(name)
                for sel in self._targeted_by.get(name, ()):
                    sel.resolve(found)

    def set_local_shard(self, shard: str, shards: Iterable[str]) -> None:
        """This engine routes the queues of `shard` only, one of `shards` (a service's shard
        router, whose engine opens its own store only). A destination is read on its home
        shard (`destination_home`); a DELIVER to one read on another shard is a MOVE into
        its **delivery queue** there, the queue of the destination's name (a mailbox the
        service makes first), carried and settled back as any MOVE across shards. A
        selector delivering to a destination whose home has no such queue is refused; a
        message whose envelope names one is dead-lettered (`no-target`)."""
        names = tuple(shards)
        for name in (shard, *names):
            check_name("shard", name)
        if shard not in names or len(set(names)) != len(names):
            raise InvalidArgument(f"shard {shard!r} must be one of distinct shards {names!r}")
        with self._lock:
            self._local_shard = shard
            self._shards = names

    def set_destination_homes(self, homes: Mapping[str, str]) -> None:
        """The homes recorded for destinations, destination -> shard (see the module doc);
        each call replaces the last. A bad name is refused (InvalidName), the last homes
        kept."""
        for name, shard in homes.items():
            check_name("destination", name, allow_reserved=True)
            check_name("shard", shard)
        with self._lock:
            self._homes = dict(homes)

    def destination_home(self, destination: str) -> str | None:
        """The shard whose subscribers of `destination` read it: the shard of the queue of
        that name, else its recorded home, else where placement would put a queue of that
        name (None: this engine has no shards)."""
        with self._lock:
            if not self._shards:
                return None
            found = self._queue_or_home(destination)
            if found is not None:
                return found
            return place(destination, self._shards, store_of=self._queue_or_home)

    def _queue_or_home(self, name: str) -> str | None:
        """The shard of the queue `name` (here or a stand-in), else its recorded home."""
        found = self._store_of(name)
        return found if found is not None else self._homes.get(name)

    def _elsewhere(self, destination: str) -> str | None:
        """The shard `destination` is read on, when not this one (a DELIVER to it is a MOVE
        into its delivery queue there)."""
        local = self._local_shard
        if local is None:
            return None
        home = self.destination_home(destination)
        return home if home is not None and home != local else None

    def _no_delivery_queue(self, destination: str) -> str | None:
        """The shard `destination` is read on when a DELIVER to it cannot be made here: it
        is read on another shard, which has no queue of its name (its delivery queue)."""
        home = self._elsewhere(destination)
        if home is None or destination in self._remote:
            return None
        return home

    def check_target(self, name: str) -> None:
        """NotFound unless `name` is a queue here or another shard's queue (a stand-in):
        where `publish_many` may send, and with it a dead letter sent on or a message
        operation's target."""
        with self._lock:
            if isinstance(name, str) and name in self._remote:
                return
            self._queue(name)

    def _forward_all(self, target: RemoteQueue, messages: list[Message]) -> None:
        """Messages published into another shard's queue: forwarded there as they are (a
        forward's arrival is routed there as any publish; its limit applies there)."""
        visited = self._visited
        for message in messages:
            visited.add((message.mid, target.name))
            self._forward(target, message, None, 0)

    def remote_queues(self) -> dict[str, str]:
        """The remote stand-ins: name -> shard."""
        with self._lock:
            return {name: qrt.remote for name, qrt in self._remote.items()}

    def take_forwards(self) -> tuple[list[Forward], list[Settle]]:
        """The forwards and settles the calls since the last take recorded, in order; the
        caller carries them to their shards (and must, once it commits the calls)."""
        with self._lock:
            forwards, settles = self._forwards, self._settles
            self._forwards, self._settles = [], []
            return forwards, settles

    def arrive_forwarded(
        self, shard: str, forwards: Iterable[tuple[str, Message, Iterable[str], Any, int]]
    ) -> list[Delivery]:
        """Messages another shard (`shard`) forwarded here, each (queue, message, visited,
        origin or None, delivery count), arrive in one call; the Deliveries. A queue that
        no longer exists drops its message (counted by no queue) and settles its origin."""
        items = []
        for queue, message, visited, origin, count in forwards:
            if not isinstance(queue, str) or not isinstance(message, Message):
                raise InvalidArgument("a forward names a queue and carries a message")
            if origin is not None:
                origin = remote_origin(shard, (str(origin[0]), int(origin[1]), str(origin[2])))
            items.append((queue, message, tuple(visited), origin, int(count)))
        with self._lock:
            return self._run(self._arrive_forwarded, items)

    def _arrive_forwarded(self, items: list[tuple]) -> None:
        visited = self._visited
        for queue, message, seen, origin, count in items:
            mid = message.mid
            target = self._queues.get(queue)
            if target is None or (mid, queue) in visited:
                # gone since it was sent, or already here in this call (two copies of one
                # routing met): it is not kept, and a MOVE's origin is settled
                self._settle(origin)
                continue
            visited.update((mid, name) for name in seen)
            visited.add((mid, queue))
            self._arrive(target, message, origin, count)

    def settle_forwarded(self, origins: Iterable[tuple[str, int, str]]) -> list[Delivery]:
        """Entries this shard MOVEd to another shard left their queues there: settle each
        (queue, selector id, tag) here (one whose selector is gone is let go)."""
        checked = [(str(queue), int(selector), str(tag)) for queue, selector, tag in origins]
        with self._lock:
            return self._run(self._settle_all, checked)

    def _settle_all(self, origins: list[tuple[str, int, str]]) -> None:
        for origin in origins:
            self._settle(origin)

    # -- called by the rules ----------------------------------------------------------------
    def _forward(
        self,
        target: RemoteQueue,
        message: Message,
        origin: tuple[str, int, str] | None,
        delivery_count: int,
    ) -> None:
        mid = message.mid
        seen = tuple(name for visit, name in self._visited if visit == mid)
        self._forwards.append(
            Forward(target.remote, target.name, message, seen, origin, delivery_count)
        )

    def _settle_remote(self, name: str, selector_id: int, tag: str) -> bool:
        """Settle an origin of another shard (recorded for it); False when `name` is no
        remote origin."""
        found = split_remote(name)
        if found is None:
            return False
        self._settles.append(Settle(found[0], (found[1], selector_id, tag)))
        return True
