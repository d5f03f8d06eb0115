"""The group commit: this process's publishes appended to the store's inbox in groups, for
every door that publishes on the event loop (/ws/publish/ frames, live/publish.py; STOMP
SENDs, stompgate/session.py; token HTTP publishes, api/direct.py). Each door subclasses
`Pending` to hear its publishes' outcome and hands them to `group_commit()`.

Theory of operation. The group commit (`GroupCommit`, one per process) gathers the
publishes that arrive while its previous append is on its way (or, when it is idle, during
the current event-loop turn) and appends them in ONE round trip: one Lua call that checks
the wiring version the publishes were sorted by and appends them in order, leaving them
all out when the inbox holds XUMP_INBOX_LIMIT commands (engine.relay.GUARDED_PUSH,
RelayClient's bounded push behind a guard), which rings the router's doorbell with the
commands it appended (the ring carries them: the router reads no inbox for them). So a
client that sends one message at a time still rides batches of whatever arrived
meanwhile, and every publish still costs one fsync at most, shared. The mids are given
out by the process's RelayClient (`publish_command`): the same prefix and serials as the
relay client's own publishes.

The co-located path (SPEC §11; the STOMP server with XUMP_STOMP_ROUTES=true). When this
process's own router drains the store (runtime.router_here), the group commit hands it the
commands in memory instead (`_hand`, runtime.Router.hand): the router applies them in its
next step and their publishes are answered once that step's commit came back, its one
durable write (engine.relay.Handed has the argument). The router checks the wiring
version they were sorted by as the guarded append would, and a handoff that follows an
inbox append of this process makes the step read the inbox first, so a publisher's own
commands never overtake each other. What the router did not write because it stopped
routing (NotWritten) goes to the inbox after all, in order. When it can (`_step_here`: no
inbox append of this process waits to be read first, the router's thread is not stepping
and has no handoffs waiting) the step is made right here on the event loop and its commit
sent on the loop's connection and awaited (runtime.Router.apply_here;
engine/relay's package doc, "Deferred commits"): no thread hop on a SEND's way.

The wiring version decides, as runtime.Service.publish_many does, whether the queue
exists (else `not_found`) and whether it drops what does not fit (a limit, no overflow
selector, no dead-letter queue): such a publish is a call the router answers
(RelayClient.publish_applied's command), so `queue_full` is exact and a publish is
answered once published (`Pending.await_router`; `router_answer`). When the version moved
since the publishes were sorted, the Lua call appends nothing and says so: the group
re-reads the wiring and sorts again. With shards (`ShardedCommit`) each publish goes to the
group commit of its queue's shard.

A refused append (inbox full, Redis away) refuses every publish in it, each told its own
error; a refused publish changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

import redis
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings

from engine import errors as engine_errors
from engine.errors import InboxFull, InternalError, NotFound, NotWritten, XumpError
from engine.relay import GUARDED_PUSH, Handed, call_outcome, store_failure
from engine.relay.trace import TRACE
from xumpweb import redis_clients
from xumpweb.api.publishing import MAX_BATCH
from xumpweb.live.lean_redis import evalsha
from xumpweb.live.tracing import trace_later
from xumpweb.runtime import MOVED, NOT_HERE, HereStep, Router, Service, router_here, service

logger = logging.getLogger("xump.live")

GROUP_MAX = 1000  # publishes in one inbox append at most


# publishes and the command that carries them: its JSON for the inbox, or (this process's
# router takes it) the Handed command itself
Going = tuple[list["Pending"], "bytes | Handed"]


class Pending:
    """One publish on its way to the inbox: what GroupCommit needs of it. A transport
    subclasses it to hear the outcome (`done`, `fail`; `await_router` for a publish the
    router answers, see RouterAnswers); `finished` once it has one."""

    __slots__ = ("applied", "finished", "messages", "mids", "queue", "reply")

    def __init__(self, queue: str, messages: list) -> None:
        self.queue = queue
        self.messages = messages
        self.mids: list[str] = []
        self.applied = False
        self.reply: str | None = None
        self.finished = False

    def done(self) -> None:
        raise NotImplementedError

    def fail(self, error: XumpError) -> None:
        raise NotImplementedError

    def await_router(self) -> None:
        raise NotImplementedError


class RouterAnswers:
    """A connection's publishes the router answers (a queue that drops when full): each
    waited for in order, after those before it; `done` or `fail` told."""

    def __init__(self) -> None:
        self.waiting: asyncio.Queue[Pending] = asyncio.Queue()
        self.task: asyncio.Task | None = None

    def wait(self, item: Pending) -> None:
        self.waiting.put_nowait(item)
        if self.task is None:
            self.task = asyncio.create_task(self._run())

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def _run(self) -> None:
        while True:
            await router_answer(await self.waiting.get())


async def router_answer(item: Pending) -> None:
    """Wait for the router's answer to a publish it answers (`item.reply`), and tell it."""
    timeout = settings.XUMP_CALL_TIMEOUT
    try:
        found = await group_commit().answers.blpop([item.reply], timeout=timeout)  # type: ignore[list-item]
        call_outcome("publish", timeout, found[1] if found else None)
    except XumpError as error:
        item.fail(error)
    except redis.RedisError as error:
        item.fail(store_failure(error, "reading the router's answer"))
    else:
        item.done()


class Gathered:
    """Publishes handed over while a batch is in flight go together in the next one
    (batching only when work waits, never a timer): the loop GroupCommit and ShardedCommit
    share. A subclass sends a batch (`send`, at most `batch_max` items; None: all)."""

    batch_max: int | None = None

    def __init__(self) -> None:
        self.pending: deque[Pending] = deque()
        self.task: asyncio.Task | None = None

    def submit(self, item: Pending) -> None:
        self.pending.append(item)
        if self.task is None:
            self.task = asyncio.create_task(self._run())

    def submit_all(self, items: list[Pending]) -> None:
        self.pending.extend(items)
        if self.task is None:
            self.task = asyncio.create_task(self._run())

    async def send(self, batch: list[Pending]) -> None:
        raise NotImplementedError

    async def _run(self) -> None:
        try:
            pending = self.pending
            while pending:
                # at most `batch_max` from the head at a time: what comes meanwhile joins
                # the tail. (Slicing the rest off a list at every batch copied it each
                # time: with tens of thousands of pipelined SENDs waiting, a sixth of the
                # STOMP server's time.)
                size = self.batch_max or len(pending)
                if len(pending) <= size:
                    batch = list(pending)
                    pending.clear()
                else:
                    batch = [pending.popleft() for _ in range(size)]
                await self._send_one(batch)
        finally:
            self.task = None

    async def _send_one(self, batch: list[Pending]) -> None:
        try:
            await self.send(batch)
        except Exception as problem:  # every publish in it must hear of it
            logger.exception("publishing %d frame(s) failed", len(batch))
            kind = type(problem).__name__
            failure = InternalError(f"internal error ({kind}); see the server log")
            for item in batch:
                if not item.finished:
                    item.fail(failure)


class GroupCommit(Gathered):
    """This process's publishes, appended to the inbox in groups (see the module doc)."""

    batch_max = GROUP_MAX

    def __init__(self, running: Service) -> None:
        super().__init__()
        self.service = running
        self.relay = running.relay
        self.keys = running.keys
        self.worker_routing = running.routing == "worker"
        self.redis = redis_clients.for_store(running.store)
        self.lean = redis_clients.lean_for_store(running.store)  # the appends (lean_redis.py)
        # for the router's answers: its reads block up to the call timeout, longer than
        # redis-py's default socket timeout (5 s), which stays for the appends
        self.answers = redis_clients.for_store(
            running.store, socket_timeout=settings.XUMP_CALL_TIMEOUT + 10
        )
        self.scheduling: set[asyncio.Task] = set()  # routing tasks being scheduled
        self.version: bytes | None = None  # the wiring version the sets below are from
        self.queues: frozenset[str] = frozenset()
        self.dropping: frozenset[str] = frozenset()
        # it appended to the inbox since its last handoff was committed (see _hand)
        self.appended = True

    async def send(self, batch: list[Pending]) -> None:
        for _ in range(5):  # the wiring moving under us more often than this is unheard of
            if self.version is None:
                try:
                    await self._read_wiring(await self.redis.get(self.keys["wiring"]))
                except redis.RedisError as error:
                    self._refuse(batch, store_failure(error, "reading the wiring version"))
                    return
            if any(item.queue not in self.queues for item in batch):
                # a queue the wiring read lacks: read the wiring again before saying so
                try:
                    latest = await self.redis.get(self.keys["wiring"])
                except redis.RedisError as error:
                    self._refuse(batch, store_failure(error, "reading the wiring version"))
                    return
                if (latest or b"") != self.version:
                    await self._read_wiring(latest)
            router = router_here(self.service.store)
            going = self._sort(batch, here=router is not None)
            if not going:
                return
            if router is not None:
                going = await self._hand(router, going)
                if going is None:  # the wiring moved: sort again by the new one
                    continue
                if not going:
                    return
            limit = "" if self.relay.inbox_limit is None else self.relay.inbox_limit
            # the push rings the router's doorbell with the commands (engine.relay.PUSH)
            commands: list[tuple] = [
                evalsha(GUARDED_PUSH,
                        [self.keys["inbox"], self.keys["pushed"], self.keys["wiring"]],
                        [self.version, limit, "b" * len(going), self.keys["doorbell"],
                         *[payload for _, payload in going]]),
            ]  # fmt: skip
            if self.worker_routing:
                commands.append(("SET", self.keys["kicked"], "1", "NX", "EX", 30))
            try:
                try:
                    answers = await self.lean.execute(*commands)
                except redis.exceptions.NoScriptError:
                    # Redis's scripts were flushed: nothing was pushed (the doorbell and
                    # the kick may go twice, which is harmless); the next connection
                    # loads them again (lean_redis.py)
                    answers = await self.lean.execute(*commands)
            except redis.RedisError as error:
                self._refuse([item for items, _ in going for item in items],
                             store_failure(error, "appending to the inbox"))  # fmt: skip
                return
            pushed = answers[0]
            if isinstance(pushed, list):  # the wiring changed: sort again by the new one
                await self._read_wiring(pushed[0])
                for items, _ in going:
                    for item in items:
                        item.mids = []
                continue
            if self.worker_routing and answers[1]:
                # beside, not before the answers: the publishes are durable already, and
                # Celery's first send of a process takes a few hundred milliseconds
                scheduling = asyncio.create_task(
                    sync_to_async(_schedule_router, thread_sensitive=False)(self.service)
                )
                self.scheduling.add(scheduling)
                scheduling.add_done_callback(self.scheduling.discard)
            if pushed < 0:
                self._refuse([item for items, _ in going for item in items], InboxFull(
                    f"the inbox of store {self.service.store!r} holds "
                    f"{self.relay.inbox_limit} commands or more (routing is behind or "
                    "stopped): publish again later"))  # fmt: skip
                return
            self.appended = True  # a handoff from now on reads the inbox first
            self._durable(going)
            return
        self._refuse(batch, engine_errors.StoreError("the wiring kept changing; publish again"))

    def _durable(self, going: list[Going]) -> None:
        """Answer publishes whose commands are durable (appended, or committed by this
        process's router): `published` now, or the router's answer for those it answers."""
        appended = time.time()
        for items, _ in going:
            for item in items:
                if item.applied:
                    item.await_router()
                else:
                    item.done()
        traced = [mid for items, _ in going for item in items
                  for message, mid in zip(item.messages, item.mids, strict=False)
                  if TRACE in message.headers]  # fmt: skip
        if traced:  # bench-only (engine/relay/trace.py)
            trace_later(self.lean, self.service.store, "inbox", appended, traced)

    async def _hand(self, router: Router, going: list[Going]) -> list[Going] | None:
        """SPEC §11's co-located path: hand the commands to this process's own router,
        which applies them in its next step, whose commit is their one durable write (see
        engine.relay.Handed). The commands left for the inbox: none once all are answered,
        or those not written when the router stopped routing (in order, for the inbox
        append); None when the wiring moved since they were sorted (nothing applied)."""
        handed = [command if isinstance(command, Handed) else Handed.of(command)
                  for _, command in going]  # fmt: skip
        try:
            moved = await self._step_here(router, handed)
        except XumpError as error:
            self._durable([pair for pair, command in zip(going, handed, strict=True)
                           if command.committed])  # fmt: skip
            left = [(items, command.payload() if isinstance(command, Handed) else command)
                    for (items, command), made in zip(going, handed, strict=True)
                    if not made.committed]  # fmt: skip
            if isinstance(error, NotWritten):
                return left  # none of these was written: the inbox takes them
            # the commit may or may not have happened: the publisher hears of it, as of
            # an inbox append whose answer was lost
            self._refuse([item for items, _ in left for item in items], error)
            return []
        if moved == MOVED:
            self.version = None  # read again at the top of `send`
            for items, _ in going:
                for item in items:
                    item.mids = []
            return None
        self.appended = False  # what it appended before was in the inbox the step read
        self._durable(going)
        return []

    async def _step_here(self, router: Router, handed: list[Handed]) -> str | None:
        """The step that applies `handed`: made on this event loop and its commit sent on
        the loop's connection when the router can (runtime.Router.apply_here: no
        thread hop on the way), else by the router's thread (Router.hand). MOVED, or None
        once committed; raises the step's StoreError (see `_hand`)."""
        step: HereStep | str = NOT_HERE
        if not self.appended:  # else the router reads the inbox first: its thread's work
            step = await router.apply_here(handed, self.version or b"")
        if step == NOT_HERE:
            future = router.hand(handed, self.version or b"", after_inbox=self.appended)
            if future is None:
                raise NotWritten("this process's router does not route now")
            return await asyncio.wrap_future(future)  # type: ignore[no-any-return]
        if isinstance(step, str):
            return step  # MOVED
        committed = time.time()
        for hop, _, mids in step.traces or ():  # bench-only (engine/relay/trace.py)
            trace_later(self.lean, self.service.store, hop, committed, mids)
        return None

    def _sort(self, batch: list[Pending], here: bool = False) -> list[Going]:
        """The publishes of `batch` that go to the inbox, encoded by the wiring version
        read, as (publishes, command) pairs; the others are answered (not_found) here.
        Consecutive publishes to the same queue go as ONE publish command (the router
        applies a command of many messages for much less than as many commands); one the
        router must answer (`applied`) goes alone. `here`: this process's router takes
        them (`_hand`), so a publish is its Handed command, not encoded (Handed.publishing:
        the encoding and the router's decoding of each message, a tenth of the STOMP
        server's time end to end, are left out)."""
        going: list[Going] = []
        run: list[Pending] = []
        size = 0  # messages in `run`
        for item in batch:
            if item.finished:
                continue
            if item.queue not in self.queues:
                item.fail(NotFound(f"queue {item.queue!r} does not exist"))
                continue
            item.applied = item.queue in self.dropping
            if run and (
                item.applied
                or run[0].applied
                or item.queue != run[0].queue
                or size + len(item.messages) > MAX_BATCH
            ):
                self._encode(run, going, here)
                run, size = [], 0
            run.append(item)
            size += len(item.messages)
        if run:
            self._encode(run, going, here)
        return going

    def _encode(self, run: list[Pending], going: list[Going], here: bool = False) -> None:
        if here and not run[0].applied:  # one command of them all, for this process's router
            try:
                messages = self.relay.stamped([m for item in run for m in item.messages])
            except XumpError:
                pass  # one of them is refused: each goes on its own, below
            else:
                at = 0
                for item in run:
                    item.mids = [m.mid for m in messages[at : at + len(item.messages)]]
                    at += len(item.messages)
                going.append((run, Handed.publishing(run[0].queue, messages)))
                return
        if len(run) > 1:
            messages = [message for item in run for message in item.messages]
            try:
                payload, mids, _ = self.relay.publish_command(run[0].queue, messages)
            except XumpError:
                pass  # one of them is refused: each goes on its own, below
            else:
                at = 0
                for item in run:
                    item.mids = mids[at : at + len(item.messages)]
                    at += len(item.messages)
                going.append((run, payload))
                return
        for item in run:
            try:
                payload, item.mids, item.reply = self.relay.publish_command(
                    item.queue, item.messages, item.applied
                )
            except XumpError as error:
                item.fail(error)
                continue
            going.append(([item], payload))

    async def _read_wiring(self, version: bytes | None) -> None:
        """The wiring as of `version` (the wiring key's value as Redis holds it)."""
        self.queues, self.dropping = await _wiring_sets(self.service, int(version or 0))
        self.version = version or b""

    def _refuse(self, items: list[Pending], error: XumpError) -> None:
        for item in items:
            if not item.finished:
                item.fail(error)


@database_sync_to_async
def _wiring_sets(running: Service, version: int) -> tuple[frozenset[str], frozenset[str]]:
    """The queues of the shard, and those that drop what does not fit, as wiring `version`
    (the shard's) has them."""
    return running.queue_names_here(version), running.drops_when_full_here(version)


class ShardedCommit(Gathered):
    """With shards (SPEC §10): this process's publishes, each handed to the group commit
    of its queue's shard, by the placement last read (read again, with every shard's
    wiring version, when a publish names a queue it lacks); each shard's group commit then
    checks its own shard's version in its guarded append, as with one store, so a publish
    to a queue deleted since is refused there. A queue no shard holds is answered
    not_found here."""

    def __init__(self, running: Service) -> None:
        super().__init__()
        self.service = running
        self.shards = {store: GroupCommit(shard) for store, shard in running.shards.items()}
        # every shard's keys: a call's answer waits on the queue's shard
        self.redis = redis_clients.general()
        self.answers = redis_clients.general(socket_timeout=settings.XUMP_CALL_TIMEOUT + 10)
        # queue -> shard, as last read: kept while every publish's queue is in it (a queue
        # deleted since is refused by its shard's own guarded append, which checks that
        # shard's wiring version)
        self.stores: dict[str, str] | None = None

    async def send(self, batch: list[Pending]) -> None:
        stores = self.stores
        if stores is None or any(item.queue not in stores for item in batch):
            # a queue the placement read lacks: read the wiring again before saying so
            try:
                versions = await redis_clients.get_many(self.redis, self.service.wiring_keys)
                version = sum(int(found or 0) for found in versions)
            except redis.RedisError:
                try:  # a shard's server away (a cluster's node down): the others', one by one
                    version = await sync_to_async(self.service.wiring_version)()
                except redis.RedisError as error:
                    failure = store_failure(error, "reading the wiring version")
                    for item in batch:
                        item.fail(failure)
                    return
            stores = await database_sync_to_async(self.service.placement.stores)(version)
            self.stores = stores
        by_shard: dict[str, list[Pending]] = {}
        for item in batch:
            store = stores.get(item.queue)
            if store is None or store not in self.shards:
                item.fail(NotFound(f"queue {item.queue!r} does not exist"))
                continue
            by_shard.setdefault(store, []).append(item)
        for store, items in by_shard.items():
            self.shards[store].submit_all(items)


def _schedule_router(running: Service) -> None:
    """One routing task for this burst (as runtime.Service.kick does)."""
    from kombu.exceptions import OperationalError

    from xumpweb.router.tasks import route

    try:
        route.delay(running.store)
    except OperationalError as error:
        logger.warning("cannot schedule a router: %s", error)


_group: GroupCommit | ShardedCommit | None = None


def group_commit() -> GroupCommit | ShardedCommit:
    global _group
    if _group is None:
        running = service()
        _group = ShardedCommit(running) if running.sharded else GroupCommit(running)
    return _group
