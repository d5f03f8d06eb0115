"""One consumer's side of a destination's outbox: taking, settling, giving back.

Theory of operation. The router appends a DELIVER selector's deliveries to its
destination's **outbox**, a Redis list (engine/relay/). A consumer (a /ws/subscribe/
connection, a STOMP subscription) owns one `OutboxReader`: it takes up to `count` items off
that list with the relay's TAKE script (one round trip that also notes each tag in the
store's taken set: the delivery timeout starts now, not while the delivery waited) and
notes them as unsettled. Consumers of the same destination compete for the same list, so
they share its work by credit.

When the outbox is empty the reader waits (up to POP_WAIT) in a **BLMOVE of the outbox onto
the store's claimed list** (SPEC §11: no third durable write on a lone message's path). The
router's step that appends a delivery wakes it in the same turn of Redis's event loop, so
the move is written to the AOF with the step and fsync'd with it; Redis answers the BLMOVE
only after that fsync, so the frame leaves after the step is durable, and the claim costs
the message no fsync of its own. The claimed item is the consumer's alone (the move is
atomic). The reader hands it on and only then starts its delivery timeout, without waiting
(STAMP, in the round trip of its next take or settlement); should the consumer die before,
the router's SWEEP starts it, at most a second late. When the destination has revoked
deliveries (it was away; the router gave its work to the pack) the claim is checked before
the frame goes (CLAIM_CHECK: one more round trip, only then). A consumer whose deliveries
are settled as they are sent (`settle_on_claim`: STOMP's ack:auto) claims onto the
autoacked list instead: the claim is the ack, which the router applies in its next step
(engine/relay/__init__.py); the router finds the claims when it next looks at that list
(xumpweb/runtime.py, CLAIMS_LOOK), and the reader rings its doorbell when it closes.

**Filtering consumers.** A consumer with a filter of its own (a STOMP `selector` on a
/queue/ subscription, as ActiveMQ's queue selectors) reads the head of the outbox (up to
SCAN items), keeps the items its filter wants and takes exactly those with TAKE_THESE: the
others stay, in order, for the destination's other consumers. No blocking pop can wait for
an item it wants behind items it does not (the list is not empty), and a poll would make
such an item wait (SPEC §11) and read the head again and again while it does not change.
So the reader looks again when, and only when, the outbox changes, told by Redis itself:
* **The wake-up is Redis's client-side caching.** The reader reads its outbox on a
  connection of its own (`watch`, lean_redis.py's tracking) that has CLIENT TRACKING on:
  Redis remembers that it read the key and pushes it one `invalidate` message when any
  other connection next changes it: the router's commit appending deliveries, another
  consumer's take or claim (which moves the head the reader sees), an item given back
  (UNTAKE), a PURGE. One push per read (the key is remembered again by the next read), so
  a busy outbox costs the reader at most one look per change and one look at a time,
  never a storm; with NOLOOP its own take (TAKE_THESE goes on the same connection) does
  not wake it, as it looks again after a take anyway. The writers do nothing for it: the
  router's commit, its scripts and every other consumer send the same commands as before,
  and none waits for the push, which Redis writes after the turn's fsync like any reply.
  (A ring from the router instead, as its doorbell is rung, would need the router to know
  which destinations have filtering consumers, a lookup or a command in every commit, and
  would say nothing of other consumers' takes; a pub/sub message can be lost unnoticed,
  a push only with its connection, which the reader sees end.)
* **No wake-up lost.** `changed` is cleared before each look is sent; a change after the
  look's read was executed makes a push that comes after its reply, on the same
  connection, so the wait that follows sees it; the push of a change made before the
  read comes ahead of its reply, and costs one needless look at most. The end of the
  connection (Redis restarted, a network fault) also wakes the reader, since Redis
  forgets what a connection tracked with it: it looks again on a new connection, and
  while Redis is away the pump retries every POP_WAIT. As a last fallback (a connection
  silently dead, a push lost for any reason), a reader that heard nothing for POP_WAIT
  looks again anyway: one cheap look a second while nothing changes, never the path of a
  message in the normal case.
* **A look reads what is new, not the whole head again.** Items are unique (each carries
  its tag) and the outbox changes only by removals anywhere, pushes at the head (UNTAKE)
  and appends at the tail (the router). So when the head it knows (`head`: what the last
  look read, less what it took since) still starts and ends with the same items, nothing
  was removed from it nor pushed before it, and only the items after it are new: one
  round trip of two LINDEX and an LRANGE of what follows it, so a long head of items
  nobody takes costs a few bytes a change, not SCAN items. Otherwise it reads the whole
  head again, and also when it has trusted the ends after a change for POP_WAIT (items
  given back together with one of the head's own, while others took one of its middle,
  could keep both ends). Items already judged are not decoded again (`judged`).
* **Shards and Redis Cluster.** The watch is a connection to the server that holds the
  destination's home shard (xumpweb/shards.py; on a cluster the node serving its hash tag's
  slot), where the outbox key and every write to it live: tracking is per server, and the
  key's server is the one that pushes.
* **What it costs others.** Nothing when no filtering consumer exists: no command, no
  write, no fsync anywhere. Once any connection has used tracking, Redis looks up each key
  a command writes in its tracking table (a radix-tree lookup, no I/O); a push is sent only
  for an outbox a filtering reader read since it last changed.

Acks go to the router at once as a relay confirm command (the JSON
engine.relay.RelayClient.confirm writes, appended to the store's inbox by engine.relay.PUSH,
which rings the router's doorbell with it), in the same round trip as the kick (as
runtime's relay client sends every command, without a thread hop), the stamps due and the
removal of the tags from the taken set. While one round trip is in
flight the acks that come meanwhile are gathered and go together when it returns: batching
only when work is already waiting, never a timer.
Commands Redis does not take (it is away) are kept and sent again, first, once it answers.
`close()` rejects with requeue every delivery taken and not seen settled, in the order it
was delivered: each goes back to the head of its queue and out again (redelivered=true) to
whoever consumes the destination.

`presence()` tells the router the destination has a consumer (PRESENCE_TTL_MS) and the
consumers registry who it is (registry.py), for as long as the reader is open. When the
destination had no consumer (its presence key was gone), it rings the routers with an
arrival (runtime.py), so work held while the destination was away goes out at once.

Rules this file keeps:
* a filtering reader waits for a change of its outbox, never for a time on the normal path:
  POP_WAIT only as the fallback against a wake-up lost (see "Filtering consumers");
* a take in flight is never cancelled (its items would leave the list unseen, and come
  back only at their delivery timeout): `close()` waits for it, at most POP_WAIT; what
  it returns to a consumer that is ending goes back untaken (`untake`), first, in order;
* settlements reach the router in the consumer's order (a reject flushes the acks first).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async

from engine.relay import (
    CLAIM_CHECK,
    PRESENCE_EVERY,
    PRESENCE_TTL_MS,
    PUSH,
    STAMP,
    TAKE,
    TAKE_THESE,
    UNTAKE,
    delivery_from_json,
)
from xumpweb import redis_clients
from xumpweb.live import registry
from xumpweb.live.frames import encode
from xumpweb.live.lean_redis import LeanRedis, answer, evalsha
from xumpweb.runtime import Service

logger = logging.getLogger("xump.live")

POP_WAIT = 1.0  # seconds a pop waits for the outbox; also the longest a close waits for it
MAX_POP = 1000  # deliveries taken off the outbox at once
SCAN = 1000  # items of the outbox head a filtering consumer looks at
ACK_BATCH = 1000  # acks gathered (while a round trip is in flight) go at once past this
RESEND_EVERY = 0.2  # seconds between tries to send acks and rejects while Redis is away

Problem = Callable[[str], Awaitable[None]]  # told when Redis refuses (the detail)


async def home(found: Service, destination: str) -> Service:
    """The client of the shard whose outbox `destination`'s subscribers read (its home,
    xumpweb/shards.py); with one shard, `found` itself."""
    if not found.sharded:
        return found
    return await sync_to_async(found.shard_for, thread_sensitive=False)(destination)


def _retrieved(future: asyncio.Future) -> None:
    """Take a future's exception (one nobody will await), so that asyncio does not log it
    as never retrieved."""
    if not future.cancelled():
        future.exception()


def _tag(item: bytes) -> str | None:
    """An outbox item's tag (None if it is not an item the router wrote)."""
    if item.startswith(b'{"tag":"'):  # as the router writes them (relay/wire.py): read up
        end = item.find(b'"', 8)  # to the closing quote, as the scripts' tag_of does
        if end > 0 and b"\\" not in item[8:end]:
            return item[8:end].decode("utf-8", "replace")
    try:
        return delivery_from_json(item).tag
    except Exception:  # not an item the router wrote: the consumer sets it aside
        return None


class OutboxReader:
    """A consumer's hold on one destination's outbox (see the module doc)."""

    def __init__(
        self,
        found: Service,
        client: aioredis.Redis,
        destination: str,
        on_problem: Problem,
        wanted: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.destination = destination
        self.found = found
        keys = found.keys
        self.outbox = keys["outbox"] + destination
        self.inbox = keys["inbox"]
        self.pushed = keys["pushed"]
        self.kicked = keys["kicked"]
        self.doorbell = keys["doorbell"]
        self.taken = keys["taken"]
        self.claimed_key = keys["claimed"]
        self.autoacked_key = keys["autoacked"]
        self.revoked = keys["revoked"] + destination
        self.present = keys["present"] + destination
        self.store = found.store
        self.registry_store = found.main.store  # who consumes: one list, on shard 0
        self.worker_routing = found.routing == "worker"
        self.redis = client
        # the commands of a message's way (take, stamps, acks) go on the process's lean
        # client (lean_redis.py), shared by its readers; the claims wait on a connection
        # of their own (`blocking`)
        self.lean = redis_clients.shared_lean(found.store)
        # the registry's server: this one, but on a cluster shard 0's node may be another
        self.registry_redis = client
        if self.registry_store != self.store and redis_clients.clustered():
            self.registry_redis = redis_clients.for_store(self.registry_store)
        self.untake_script = client.register_script(UNTAKE)
        self.claim_check = client.register_script(CLAIM_CHECK)
        self.on_problem = on_problem
        self.wanted = wanted
        # a filtering reader (see the module doc): its connection tracking the outbox, told
        # of a change (or of that connection's end) by `changed`; the outbox's items it
        # judged at the last look; the head of the outbox as it knows it (read at the last
        # look, less what it took since); when it last read the whole head (the loop's
        # clock) and whether a look trusted the head's ends since; whether its last wait
        # ended with no change heard (the fallback)
        self.watch: LeanRedis | None = None
        self.changed = asyncio.Event()
        self.judged: dict[bytes, bool] = {}
        self.head: list[bytes] = []
        self.whole_head_at = float("-inf")
        self.trusted_ends = False
        self.quiet = False
        self.unsettled: dict[str, None] = {}  # tags taken off the outbox, in delivery order
        self.claimed: list[bytes] = []  # items claimed by a BLMOVE, not stamped yet
        # ack:auto (STOMP): a claim settles the delivery (see the module doc)
        self.settle_on_claim = False
        self.preacked: set[str] = set()  # tags of such claims, until the consumer acks them
        # settling claims the router has not heard of: ring when the reader closes (a busy
        # router finds them at its next look, runtime.CLAIMS_LOOK)
        self.ring = False
        self.drained = False  # the outbox was empty right after the last claim (see _claim)
        self.send_lock = asyncio.Lock()  # settlements go out one round trip at a time
        self.acks: list[str] = []
        self.acked = 0  # deliveries settled by an ack, for the consumers page's acks/s
        self.ack_task: asyncio.Task | None = None
        self.unsent: list[dict[str, Any]] = []  # commands Redis did not take: sent again
        self.resend_task: asyncio.Task | None = None
        self.taking = False
        self.closed = False
        # the connection a claim waits on, its own (see _claim), and its Redis client id
        # while a BLMOVE waits there: `stop` ends the wait (CLIENT UNBLOCK)
        self.blocking: LeanRedis | None = None
        self.blocked_id: int | None = None
        self.stopping = False

    # -- taking ------------------------------------------------------------------------------
    async def take(self, count: int) -> list[bytes]:
        """Up to `count` outbox items, taken (see the module doc); waits up to POP_WAIT
        for the first when there are none. The caller notes each tag it sends as
        unsettled (`unsettled[tag] = None`) and settles the rest at once."""
        self.taking = True
        try:
            if self.wanted is not None:
                return await self._take_wanted(min(count, MAX_POP))
            keys = [self.outbox, self.taken, self.revoked]
            count = min(count, MAX_POP)
            commands = []
            if self.claimed:  # the last claim was handed on: see the doc
                commands.append(self._stamp())
            if self.drained:  # the outbox was empty right after the last claim: claim again
                return await self._claim(commands)
            if commands:
                commands.append(evalsha(TAKE, keys, [count]))
                found = (await self.lean.execute(*commands))[-1]
            else:
                found = await self.lean.script(TAKE, keys, [count])
            if not found:
                return await self._claim([])
            return found  # type: ignore[no-any-return]
        finally:
            self.taking = False

    async def _claim(self, first: list[tuple]) -> list[bytes]:
        """Wait for the outbox's next item and claim it (see the module doc), after
        `first` (the stamps and the ring due, sent ahead on the same connection).

        The wait is on a connection of the reader's own, which first says its client id
        (Redis answers CLIENT ID at once, before the BLMOVE blocks): a consumer that ends
        while its claim waits ends the wait (`stop`: CLIENT UNBLOCK), so the claim takes
        nothing sent after it ended. An ack:auto claim taken after its consumer ended
        could not be given back (only the router takes items off the autoacked list):
        before, such a claim waited on for up to POP_WAIT and lost what it took.

        The length of the outbox right after the claim comes in the same round trip: when
        nothing else waits there (a lone message), the next take claims at once instead
        of first asking TAKE for what is not there (`drained`); when more waits (a burst),
        the next take takes them together."""
        into = self.autoacked_key if self.settle_on_claim else self.claimed_key
        if self.stopping:
            if first:  # nothing is claimed: the stamps and the ring go with the next take
                await self.lean.execute(*first)
            return []
        connection = self.blocking
        if connection is None:
            connection = self.blocking = redis_clients.lean_for_store(self.store)
        answers = await connection.send(
            *first,
            ("CLIENT", "ID"),
            ("BLMOVE", self.outbox, into, "LEFT", "RIGHT", POP_WAIT),
            ("EXISTS", self.revoked),
            ("LLEN", self.outbox),
        )
        every = list(answers)
        try:
            for reply in answers[: len(first)]:
                answer(await reply)
            answers = answers[len(first) :]
            self.blocked_id = answer(await answers[0])
            if self.stopping:  # `stop` came before the id was known: end the wait here
                await self._unblock()
            item = answer(await answers[1])
            self.blocked_id = None
            revoked = answer(await answers[2])
            self.drained = answer(await answers[3]) == 0
        except BaseException:
            self.blocked_id = None
            self.drained = False
            connection.abort()  # never reused half-read
            for reply in every:  # those not awaited fail with it: their errors are this one
                reply.add_done_callback(_retrieved)
            raise
        if item is None:
            return []
        if revoked:  # stamped (taken, not settled) by the check, or dropped
            keys = [into, self.taken, self.revoked]
            return [item] if await self.claim_check(keys=keys, args=[item]) else []
        if self.settle_on_claim:
            tag = _tag(item)
            if tag is not None:
                self.preacked.add(tag)
            self.ring = True
        else:
            self.claimed.append(item)
        return [item]

    def _stamp(self) -> tuple:
        """The STAMP of the items claimed and handed on since the last, to send."""
        items, self.claimed = self.claimed, []
        return evalsha(STAMP, [self.claimed_key, self.taken], items)

    async def _take_wanted(self, count: int) -> list[bytes]:
        """A filtering reader's take: the wanted items of the head, or when there are none,
        a wait until the outbox changes (see the module doc); [] then."""
        watch = self.watch
        if watch is None:
            url = redis_clients.node_url(redis_clients.store_url(), self.store)
            watch = self.watch = LeanRedis(url, timeout=None, scripts=(TAKE_THESE,),
                                           tracking=self.changed.set)  # fmt: skip
        self.changed.clear()  # before the look: a change after its read wakes the wait
        head = await self._look(watch, self.quiet)
        self.quiet = False
        # an item judged at the last look is not decoded again
        judged, wanted = self.judged, self.wanted
        self.judged = {item: judged[item] if item in judged else wanted(item) for item in head}  # type: ignore[misc]
        chosen = [item for item, keep in self.judged.items() if keep][:count]
        if chosen:
            # after the take they are gone from the outbox, taken by this reader or by
            # another before it: the rest is what the next look checks the ends of
            going = set(chosen)
            self.head = [item for item in head if item not in going]
            keys = [self.outbox, self.taken, self.revoked]
            return await watch.script(TAKE_THESE, keys, chosen)  # type: ignore[no-any-return]
        self.head = head
        if not self.stopping:
            try:
                async with asyncio.timeout(POP_WAIT):
                    await self.changed.wait()
            except TimeoutError:  # the fallback (module doc): nothing changed, or lost
                self.quiet = True
        return []

    async def _look(self, watch: LeanRedis, quiet: bool) -> list[bytes]:
        """The outbox's first SCAN items, read on `watch` (which tracks the key from then
        on): only those after the head known from the last look when its two ends are
        still where they were, else all of them (see the module doc). `quiet`: the look
        comes after a wait that heard no change (the fallback)."""
        head, outbox = self.head, self.outbox
        now = asyncio.get_running_loop().time()
        if head and not (self.trusted_ends and now - self.whole_head_at >= POP_WAIT):
            first, last, after = await watch.execute(
                ("LINDEX", outbox, 0),
                ("LINDEX", outbox, len(head) - 1),
                ("LRANGE", outbox, len(head), SCAN - 1),
            )
            if first == head[0] and last == head[-1]:
                # only a change can make the ends mislead: after none heard, the trust
                # stays as it was
                self.trusted_ends = self.trusted_ends or not quiet
                return head + after  # type: ignore[no-any-return]
        self.trusted_ends = False
        self.whole_head_at = now
        (found,) = await watch.execute(("LRANGE", outbox, 0, SCAN - 1))
        return found  # type: ignore[no-any-return]

    async def untake(self, items: list[bytes]) -> None:
        """Put items `take` returned and the consumer never handed on (it was ending
        meanwhile) back at the head of the outbox, in order, untaken: the destination's
        next consumer receives them first, and not as redeliveries. Rejecting them instead
        would requeue each behind what reached the outbox meanwhile (out of order,
        redelivered, counted as a delivery)."""
        if self.preacked:
            # a claim onto the autoacked list settled its delivery (ack:auto: settled once
            # on its way, see the module doc): it is not put back. Only the router takes
            # items off that list (it trims as many as it read), so nobody else may.
            kept = []
            for item in items:
                tag = _tag(item)
                if tag in self.preacked:
                    self.preacked.discard(tag)  # type: ignore[arg-type]
                else:
                    kept.append(item)
            items = kept
        if not items:
            return
        self.taking = True  # part of the take: `stop` waits for it rather than cancel it
        claimed = set(items)
        self.claimed = [item for item in self.claimed if item not in claimed]
        try:
            keys = [self.outbox, self.taken, self.claimed_key]
            await self.untake_script(keys=keys, args=items)
        finally:
            self.taking = False

    # -- settling ----------------------------------------------------------------------------
    async def ack(self, tags: list[str]) -> list[str]:
        """Confirm `tags` (gathered, see the module doc); the ones not unsettled here."""
        unknown = []
        for tag in tags:
            if tag in self.unsettled:
                del self.unsettled[tag]
                self.acked += 1
                if tag in self.preacked:  # its claim settled it: nothing to send
                    self.preacked.discard(tag)
                else:
                    self.acks.append(tag)
            else:
                unknown.append(tag)
        if len(self.acks) >= ACK_BATCH:
            await self.flush_acks()
        elif self.acks and self.ack_task is None:
            self.ack_task = asyncio.create_task(self._send_acks())
        return unknown

    async def reject(self, tags: list[str], requeue: bool = True, detail: str = "") -> None:
        """Reject `tags` (requeue per the queue's rules, or to the dead letters)."""
        for tag in tags:
            self.unsettled.pop(tag, None)
        await self.flush_acks()  # the router sees settlements in the consumer's order
        extra = {"detail": detail} if detail else {}
        await self.send_commands(
            [{"op": "reject", "tag": tag, "requeue": requeue, **extra} for tag in tags]
        )

    async def _send_acks(self) -> None:
        """Send the acks now, and those that came meanwhile when that returns, until none
        wait (see the module doc)."""
        try:
            while self.acks:
                await self.flush_acks()
        finally:
            self.ack_task = None

    async def flush_acks(self) -> None:
        async with self.send_lock:  # acks that came while the lock was held go with these
            tags, self.acks = self.acks, []
            if tags:
                await self._send_commands([{"op": "confirm", "tags": tags}])

    async def send_commands(self, commands: list[dict[str, Any]]) -> None:
        """Append commands to the store's inbox (as engine.relay.RelayClient does) and make
        sure a router will read them soon (as runtime's relay client does). Commands
        Redis does not take (it is away) are kept and sent again, first, once it answers:
        an ack lost with Redis would have the message delivered again at its timeout.
        One round trip at a time, in the order they were sent."""
        async with self.send_lock:
            await self._send_commands(commands)

    async def _send_commands(self, commands: list[dict[str, Any]]) -> None:
        commands, self.unsent = self.unsent + commands, []
        if not commands:
            return
        sending: list[tuple] = []
        if self.claimed:  # before their settlement: see the module doc
            sending.append(self._stamp())
        # appended and counted, ringing the router's doorbell with them (engine.relay.PUSH)
        sending.append(evalsha(PUSH, [self.inbox, self.pushed],
                               ["", "f" * len(commands), self.doorbell,
                                *[encode(command) for command in commands]]))  # fmt: skip
        kick = len(sending)  # the answer of the kicked flag's SET, when there is one
        if self.worker_routing:
            sending.append(("SET", self.kicked, "1", "NX", "EX", 30))
        # settled: their delivery timeout stops (the settlement is in the inbox already)
        settled = [tag for c in commands for tag in c.get("tags", [c.get("tag")]) if tag]
        if settled:
            sending.append(("ZREM", self.taken, *settled))
        try:
            answers = await self.lean.execute(*sending)
        except redis.RedisError as problem:
            self.unsent = commands + self.unsent
            if self.closed:  # close() says what is left unsent
                return
            if self.resend_task is None or self.resend_task.done():
                logger.warning("cannot send %d command(s) to the router: %s; sending them "
                               "again until Redis answers", len(commands), problem)  # fmt: skip
                await self.on_problem(f"cannot reach the router: {problem}")
                if not self.closed:
                    self.resend_task = asyncio.create_task(self._resend())
            return
        if self.worker_routing and answers[kick]:
            from xumpweb.router.tasks import route

            await sync_to_async(route.delay, thread_sensitive=False)(self.store)

    async def _resend(self) -> None:
        """Send the commands Redis did not take, every RESEND_EVERY seconds until it does."""
        while self.unsent and not self.closed:
            await asyncio.sleep(RESEND_EVERY)
            await self.send_commands([])

    # -- presence ----------------------------------------------------------------------------
    async def presence(self, info: Callable[[float], registry.Info]) -> bool:
        """Keep the destination's presence key and the registry entry `info(acks/s)` fresh
        until closed; True when an operator asked the consumer to close (it must)."""
        counted, at = 0, asyncio.get_running_loop().time()
        away = False  # Redis did not answer the last refresh: said once an outage
        while not self.closed:
            now = asyncio.get_running_loop().time()
            rate = (self.acked - counted) / (now - at) if now > at else 0.0
            counted, at = self.acked, now
            entry = info(rate)
            try:
                if await self.redis.set(self.present, b"1", px=PRESENCE_TTL_MS, get=True) is None:
                    await self._announce_arrival()
                if await registry.refresh(self.registry_redis, self.registry_store, entry):
                    logger.info("consumer %s of %r closed by an operator", entry["id"],
                                self.destination)  # fmt: skip
                    return True
            except redis.RedisError as problem:
                if not away:
                    logger.warning("cannot note the presence of %r: %s", self.destination,
                                   problem)  # fmt: skip
                away = True
            else:
                away = False
            await asyncio.sleep(min(PRESENCE_EVERY, registry.REFRESH_EVERY))
        return False

    async def _announce_arrival(self) -> None:
        pipe = self.redis.pipeline(transaction=False)
        self.found.announce_arrival(pipe)
        await pipe.execute()

    def info(self, connection_id: str, transport: str, who: str, remote: str, since: float,
             credit: int, acks_per_second: float) -> registry.Info:  # fmt: skip
        """The consumers registry's entry of the consumer holding this reader."""
        return {
            "id": connection_id,
            "transport": transport,
            "destination": self.destination,
            "who": who,
            "remote": remote,
            "since": since,
            "credit": max(0, credit),
            "in_flight": len(self.unsettled),
            "acked": self.acked,
            "acks_per_second": round(acks_per_second, 2),
            **registry.where(),  # type: ignore[typeddict-item]
        }

    # -- the end -----------------------------------------------------------------------------
    async def stop(self, pump: asyncio.Task, connection_id: str) -> None:
        """The consumer ends: its `pump` (the task calling `take`) stopped, never cancelled
        in the middle of a take (see the module doc), then `close`. The caller has told
        its pump to stop taking first."""
        self.stopping = True
        if not self.taking:
            pump.cancel()
        else:
            await self._unblock()  # a claim waiting ends now (see _claim)
        await asyncio.wait({pump}, timeout=POP_WAIT + 5)
        if pump.done() and not pump.cancelled() and pump.exception():
            logger.error("the pump of %r failed", self.destination, exc_info=pump.exception())
        await self.close(connection_id)

    async def _unblock(self) -> None:
        """End the wait of the claim in flight, if one waits (it answers as timed out,
        or with what it claimed before), or a filtering reader's wait for a change."""
        self.changed.set()
        waiting = self.blocked_id
        if waiting is None:
            return
        try:
            await self.lean.execute(("CLIENT", "UNBLOCK", waiting))
        except redis.RedisError as problem:  # it ends by itself within POP_WAIT
            logger.warning("cannot end the claim of %r: %s", self.destination, problem)

    async def close(self, connection_id: str | None = None) -> None:
        """Settle what this reader holds: acks out, unsettled tags back (requeue, in
        delivery order), its registry entry (`connection_id`) forgotten. Call it once the
        pump has stopped taking (see the module doc)."""
        self.closed = True
        self.stopping = True
        for connection in (self.blocking, self.watch):
            if connection is None:
                continue
            if self.taking:  # a take still waits there (stop gave up on it): dropped
                connection.abort()
            else:
                await connection.aclose()
        self.blocking = self.watch = None
        if self.ack_task is not None:  # a round trip in flight is never cancelled
            await asyncio.wait({self.ack_task}, timeout=POP_WAIT + 5)
        await self.flush_acks()
        for tag in self.preacked:  # settled by their claim (ack:auto): not given back
            self.unsettled.pop(tag, None)
        self.preacked.clear()
        if self.ring:
            self.ring = False
            try:
                await self.lean.execute(("PUBLISH", self.doorbell, b""))
            except redis.RedisError:
                pass  # the router looks at the autoacked list at every step anyway
        if self.unsettled:
            await self.send_commands(
                [{"op": "reject", "tag": tag, "requeue": True} for tag in self.unsettled]
            )
            self.unsettled.clear()
        if self.claimed:  # handed on and settled before: nothing else stamps them
            try:
                async with self.send_lock:
                    await self.lean.execute(self._stamp())
            except redis.RedisError:
                pass  # the router's SWEEP stamps them; their settlement makes that moot
        if self.unsent:  # Redis is still away and the consumer is gone
            logger.warning(
                "%d command(s) for the router not sent (Redis away); their deliveries come "
                "back at the delivery timeout", len(self.unsent),
            )  # fmt: skip
        if connection_id is not None:
            try:
                await registry.forget(self.registry_redis, self.registry_store, connection_id)
            except redis.RedisError:
                pass  # its registration expires by itself
        if self.registry_redis is not self.redis:
            await self.registry_redis.aclose()
