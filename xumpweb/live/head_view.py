"""The filtering readers' shared view of an outbox's head: one per outbox and process,
read again at every change of the outbox for all its filtering readers, which take through
it. Why it is built so, and why no wake-up is lost: xumpweb/live/outbox.py's module doc,
"Filtering consumers"; the readers themselves are outbox.py's OutboxReader.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any, Protocol

import redis
from redis.exceptions import NoScriptError

from engine.relay import TAKE_THESE
from xumpweb import redis_clients
from xumpweb.live.lean_redis import LeanRedis, answer, evalsha

logger = logging.getLogger("xump.live")

POP_WAIT = 1.0  # seconds a pop waits for the outbox; also the longest a close waits for it
SCAN = 1000  # items of the outbox head a filtering consumer looks at


class Reader(Protocol):
    """What the view needs of a filtering reader (outbox.py's OutboxReader)."""

    outbox: str  # its keys: the outbox, the taken set, the revoked set
    taken: str
    revoked: str
    store: str  # the store (shard) whose Redis server holds them
    judged: dict[bytes, bool]  # the head's items it judged: whether it wants each
    given: asyncio.Future | None  # what the view takes for it while it waits
    changed: asyncio.Event  # set when it has something to await, or must look again

    def judge(self, items: list[bytes]) -> bool: ...


def retrieved(future: asyncio.Future) -> None:
    """Take a future's exception (one nobody will await), so that asyncio does not log it
    as never retrieved."""
    if not future.cancelled():
        future.exception()


class HeadView:
    """The head of one outbox as the process's filtering readers of it see it, read again
    at every change for all of them (see "Filtering consumers" in the module doc)."""

    def __init__(self, url: str, keys: list[str]) -> None:
        self.outbox = keys[0]
        self.keys = keys  # TAKE_THESE's: the outbox, the taken set, the revoked set
        self.key = (url, self.outbox)  # in `_views`
        self.watch = LeanRedis(url, timeout=None, scripts=(TAKE_THESE,), tracking=self._heard)
        self.readers: set[Reader] = set()
        self.waiting: dict[Reader, int] = {}  # readers waiting: how many they take
        # the head as the view knows it: what the last look read, less what its readers
        # asked to take since; when it last read the whole head (the loop's clock) and
        # whether a look trusted the head's ends since (see the module doc)
        self.head: list[bytes] = []
        self.whole_head_at = float("-inf")
        self.trusted_ends = False
        # the takes asked for and not sent yet (their items, the future of their answer),
        # and their items; the takes sent with the look in flight
        self.asked: list[tuple[list[bytes], asyncio.Future]] = []
        self.asking: set[bytes] = set()
        self.sent: list[tuple[list[bytes], asyncio.Future]] = []
        # the task has something to send: a change heard (or the connection's end), takes
        self.due = asyncio.Event()
        self.failure: redis.RedisError | None = None  # the last look's, until one answers
        self.task = asyncio.create_task(self._run())
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task) -> None:
        """The task ends only when the view closes; should it fail, its readers' takes
        raise (their pumps say so, and the store watch ends their sessions in time)."""
        if task.cancelled() or task.exception() is None:
            return
        logger.error("the view of outbox %r failed", self.outbox, exc_info=task.exception())
        self._fail(redis.RedisError(f"the view of the outbox failed: {task.exception()!r}"))

    def _heard(self) -> None:
        """Redis pushed a change of the outbox, or the watch's connection ended."""
        self.due.set()

    async def take(self, items: list[bytes]) -> list[bytes]:
        """Take `items` (TAKE_THESE, with the next look); those still in the outbox then."""
        return await self._ask(items)  # type: ignore[no-any-return]

    def _ask(self, items: list[bytes]) -> asyncio.Future:
        """Ask for `items` to be taken with the next look: the future of what is taken.
        They leave the head now: no other reader of the process chooses them again."""
        going = set(items)
        self.head = [item for item in self.head if item not in going]
        self.asking |= going
        taken = asyncio.get_running_loop().create_future()
        taken.add_done_callback(retrieved)  # its reader may be gone when it fails
        self.asked.append((items, taken))
        self.due.set()
        return taken

    async def _run(self) -> None:
        """Look at the outbox whenever it changed, with the takes asked since, and at
        least every POP_WAIT (the fallback); tell the readers (see the module doc)."""
        quiet = False  # the look comes after a wait that heard nothing
        while True:
            self.sent, self.asked = self.asked, []
            self.asking = set()
            self.due.clear()  # before the look: a change after its read wakes the wait
            try:
                found = await self._look(quiet)
            except redis.RedisError as problem:
                self._fail(problem)
                await asyncio.sleep(POP_WAIT)  # as a pump retries; the readers' takes raise
                quiet = False
                continue
            self._news(found)
            quiet = False
            if not self.due.is_set():
                try:
                    async with asyncio.timeout(POP_WAIT):
                        await self.due.wait()
                except TimeoutError:  # the fallback (module doc): nothing changed, or lost
                    quiet = True

    async def _look(self, quiet: bool) -> list[bytes]:
        """The takes `sent`, answered each to its reader, then the outbox's first SCAN
        items, read on the watch (which tracks the key from then on): only those after
        the head the view knows when its two ends are still where they were, else all of
        them (see the module doc). `quiet`: the look comes after a wait that heard no
        change (the fallback)."""
        head, outbox = self.head, self.outbox
        takes = [evalsha(TAKE_THESE, self.keys, items) for items, _ in self.sent]
        now = asyncio.get_running_loop().time()
        ends = bool(head) and not (self.trusted_ends and now - self.whole_head_at >= POP_WAIT)
        if ends:
            reads: tuple[tuple, ...] = (
                ("LINDEX", outbox, 0),
                ("LINDEX", outbox, len(head) - 1),
                ("LRANGE", outbox, len(head), SCAN - 1),
            )
        else:
            reads = (("LRANGE", outbox, 0, SCAN - 1),)
        # one future for every reply (a refusal is its exception, not raised); a lost
        # connection fails it, and `_fail` the takes sent
        (replied,) = await self.watch.send(*takes, *reads, each=False)
        replies = await replied
        self._answer_takes(replies[: len(takes)])
        first, *rest = [answer(reply) for reply in replies[len(takes) :]]
        if ends:
            last, after = rest
            if first == head[0] and last == head[-1]:
                # only a change can make the ends mislead: after none heard, the trust
                # stays as it was
                self.trusted_ends = self.trusted_ends or not quiet
                return head + after  # type: ignore[no-any-return]
            (first,) = await self.watch.execute(("LRANGE", outbox, 0, SCAN - 1))
        self.trusted_ends = False
        self.whole_head_at = now
        return first  # type: ignore[no-any-return]

    def _answer_takes(self, replies: list[Any]) -> None:
        """Hand each take sent its answer. One the server did not have the script for
        (SCRIPT FLUSH) was not run: asked again, on a new connection, which loads it."""
        flushed = False
        for (items, taken), reply in zip(self.sent, replies, strict=True):
            if isinstance(reply, NoScriptError):
                self.asked.append((items, taken))
                self.asking |= set(items)
                flushed = True
            elif not taken.done():
                if isinstance(reply, BaseException):
                    taken.set_exception(reply)
                else:
                    taken.set_result(reply)
        self.sent = []
        if flushed:
            self.watch.abort()  # every reply was read: nothing else waits there

    def _news(self, found: list[bytes]) -> None:
        """A look's head becomes the view's (less what its readers asked to take since it
        was sent); the readers waiting judge its new items, and the view asks for those
        each wants (up to its count; none asked for already), with its next look, and
        wakes it to await them: a waiting reader had judged the rest of the head and
        wanted none of it."""
        self.failure = None
        asking = self.asking
        if asking:
            found = [item for item in found if item not in asking]
        known = set(self.head)
        self.head = found
        fresh = [item for item in found if item not in known]
        if not fresh:
            return
        for reader, count in list(self.waiting.items()):
            if reader.judge(fresh):
                judged, asking = reader.judged, self.asking
                chosen = [item for item in fresh if judged[item] and item not in asking]
                if chosen:  # it wakes once, when they are taken
                    del self.waiting[reader]
                    given = reader.given = self._ask(chosen[:count])
                    given.add_done_callback(lambda _, changed=reader.changed: changed.set())

    def _fail(self, problem: redis.RedisError) -> None:
        """A look failed (Redis away, most likely): what is asked fails with it, the head
        is read whole next time (what a take whose answer was lost did is unknown), and
        the readers waiting wake to raise it."""
        self.failure = problem
        self.head = []
        self.trusted_ends = False
        for _, taken in self.sent + self.asked:
            if not taken.done():
                taken.set_exception(problem)
        self.sent, self.asked, self.asking = [], [], set()
        for reader in self.waiting:
            reader.changed.set()  # its take raises the failure
        self.waiting.clear()

    async def close(self) -> None:
        """Stop the task and close the connection (its last reader closed)."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        in_flight = [taken for _, taken in self.sent + self.asked if not taken.done()]
        for taken in in_flight:  # a take its reader gave up on (see OutboxReader.close)
            taken.set_exception(redis.ConnectionError("the outbox's view was closed"))
        if in_flight:
            self.watch.abort()
        else:
            await self.watch.aclose()


# per event loop, per Redis server (its URL) and outbox key: the filtering readers' views
_views: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], HeadView]] = (
    weakref.WeakKeyDictionary()
)


def join_view(reader: Reader) -> HeadView:
    """The view of `reader`'s outbox, made now if it has no other reader."""
    url = redis_clients.node_url(redis_clients.store_url(), reader.store)
    views = _views.setdefault(asyncio.get_running_loop(), {})
    view = views.get((url, reader.outbox))
    if view is None:
        keys = [reader.outbox, reader.taken, reader.revoked]
        view = views[url, reader.outbox] = HeadView(url, keys)
    view.readers.add(reader)
    return view


async def leave_view(view: HeadView, reader: Reader) -> None:
    """`reader` closes: its view closes too when it was the last of its readers."""
    view.readers.discard(reader)
    view.waiting.pop(reader, None)
    if view.readers:
        return
    views = _views.get(asyncio.get_running_loop(), {})
    if views.get(view.key) is view:
        del views[view.key]
    await view.close()
