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
So the head is read again when, and only when, the outbox changes, told by Redis itself;
and it is read once a change for all the filtering readers of that outbox in the process,
however many (200 subscriptions with selectors on one destination, each woken and looking
at every change, cost 650 to 1,000 Redis commands a message and most of a core; see
docs/live-path.md):
* **One view of the head per outbox and process** (`HeadView`, head_view.py). The
  process's filtering readers of an outbox (in one event loop, on the Redis server holding
  it) share one view of its head: the head as the process knows it (`head`: what the last
  look read, less what its readers took since), one connection that reads it (`watch`)
  and one task that reads it again (`_run`, the **look**). The view is made when the first
  of them takes and closed, with its connection and its task, when the last one closes
  (`join_view`, `leave_view`). A reader never reads the outbox itself: it judges the
  head's items with its own filter, each item once (`judged`), and hands the view the
  items it wants (`HeadView.take`).
* **The wake-up is Redis's client-side caching.** The watch has CLIENT TRACKING on
  (lean_redis.py's tracking): Redis remembers that it read the key and pushes it one
  `invalidate` message when any other connection next changes it: the router's commit
  appending deliveries, another process's consumer taking or claiming (which moves the head
  the view knows), an item given back (UNTAKE), a PURGE. One push per read (the key is
  remembered again by the next read), so a busy outbox costs the process at most one look
  per change and one look at a time, never a storm. The writers do nothing for it: the
  router's commit, its scripts and every other consumer send the same commands as before,
  and none waits for the push, which Redis writes after the turn's fsync like any reply.
  (A ring from the router instead, as its doorbell is rung, would need the router to know
  which destinations have filtering consumers, a lookup or a command in every commit, and
  would say nothing of other consumers' takes; a pub/sub message can be lost unnoticed,
  a push only with its connection, which the view sees end.)
* **Its readers' takes go with its looks.** The takes the view's readers asked for since
  its last look are sent on the watch, each its own TAKE_THESE (one reader's refusal is
  its own), with a look after them in the same write: one round trip. The items a reader
  asks for leave the view's head at once, so no other reader of the process chooses them
  again (two readers wanting one item: the first to ask has it; between processes
  TAKE_THESE's atomic LREM decides, and the loser finds it gone at its next look). With
  NOLOOP Redis does not push the view its own takes, and a change makes Redis forget who
  read the key, the taker too: the look sent after the takes is what tracks the key again,
  and what shows the view the items its takes let into the first SCAN. So the readers of a
  process see each other's takes in the round trip of the take, with no push.
* **Who is woken.** After a look, the view judges the items new to its head for each
  reader that waits (with that reader's filter: a reader waits only when it wanted none
  of the rest) and, for one that wants some, asks for them itself (up to the reader's
  count, in order, none another reader asked for), with its next look, and wakes it to
  await them (`given`). A reader that does not wait (it is handing on its last take, its
  credit is spent) judges the head's items it has not judged at its next take. So a
  change costs the process one look and a filter call per new item and reader (each
  reader must judge each item once anyway), not a look and a wake-up per reader, and the
  reader that wants the item wakes once, with it. The view looks at each change as it
  comes, one look at a time, not at the pace of its readers.
* **No wake-up lost.** `due` is cleared before each look is sent; a change after the
  look's read was executed makes a push that comes after its reply, on the same
  connection, so the wait that follows sees it; the push of a change made before the
  read comes ahead of its reply, and costs one needless look at most. A change made
  between the view's own takes and the look sent after them is not pushed (the take made
  Redis forget the key) but that look reads after it. Every item of the head is judged by
  every reader that waits: a reader judges the head and starts waiting in one step (no
  await between), and the view puts a look's items into its head and judges the new ones
  for the readers waiting in one step too; so a reader that joins while a look is in
  flight judges the head as it is, and the new items of that look when it comes back. The
  end of the connection (Redis restarted, a network fault) also wakes the view, since Redis
  forgets what a connection tracked with it: it looks again on a new connection. While
  Redis is away the view tries again every POP_WAIT, what it was asked to take fails with
  the same problem, and its readers' takes raise it (their pumps retry, and the store
  watch counts how long, as before). As a last fallback (a connection silently dead, a
  push lost for any reason), a view that heard nothing for POP_WAIT looks again anyway:
  one cheap look a second for the process while nothing changes, never the path of a
  message in the normal case. A take waits once at most, up to POP_WAIT, and returns
  none when nothing came for it, as a pump expects.
* **A look reads what is new, not the whole head again.** Items are unique (each carries
  its tag) and the outbox changes only by removals anywhere, pushes at the head (UNTAKE)
  and appends at the tail (the router). So when the head the view knows still starts and
  ends with the same items, nothing was removed from it nor pushed before it, and only the
  items after it are new: two LINDEX and an LRANGE of what follows it, in one round trip,
  so a long head of items nobody takes costs a few bytes a change, not SCAN items.
  Otherwise it reads the whole head again, and also when it has trusted the ends after a
  change for POP_WAIT (items given back together with one of the head's own, while others
  took one of its middle, could keep both ends), and after a failure (what a take whose
  answer was lost removed is unknown).
* **Shards and Redis Cluster.** The watch is a connection to the server that holds the
  destination's home shard (xumpweb/shards.py; on a cluster the node serving its hash tag's
  slot), where the outbox key and every write to it live: tracking is per server, and the
  key's server is the one that pushes. Views are told apart by that server's URL and the
  outbox's key.
* **What it costs others.** Nothing when no filtering consumer exists: no command, no
  write, no fsync anywhere; ordinary readers of the same destination take and claim as
  before. Once any connection has used tracking, Redis looks up each key a command writes
  in its tracking table (a radix-tree lookup, no I/O); a push is sent only for an outbox a
  view read since it last changed.

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
* the filtering readers of one outbox in a process share one view of its head: one
  connection, one look a change, however many they are; the view lives exactly as long
  as its readers (made by the first one's take, closed by the last one's close);
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

from engine.errors import NotWritten, StoreError
from engine.relay import (
    CLAIM_CHECK,
    PRESENCE_EVERY,
    PRESENCE_TTL_MS,
    PUSH,
    STAMP,
    TAKE,
    UNTAKE,
    Handed,
    delivery_from_json,
)
from xumpweb import redis_clients
from xumpweb.live import registry
from xumpweb.live.frames import encode
from xumpweb.live.head_view import POP_WAIT, HeadView, join_view, leave_view, retrieved
from xumpweb.live.lean_redis import LeanRedis, answer, evalsha
from xumpweb.runtime import NOT_HERE, Router, Service, router_here

logger = logging.getLogger("xump.live")

MAX_POP = 1000  # deliveries taken off the outbox at once
ACK_BATCH = 1000  # acks gathered (while a round trip is in flight) go at once past this
RESEND_EVERY = 0.2  # seconds between tries to send acks and rejects while Redis is away

Problem = Callable[[str], Awaitable[None]]  # told when Redis refuses (the detail)


async def home(found: Service, destination: str) -> Service:
    """The client of the shard whose outbox `destination`'s subscribers read (its home,
    xumpweb/shards.py); with one shard, `found` itself."""
    if not found.sharded:
        return found
    return await sync_to_async(found.shard_for, thread_sensitive=False)(destination)


def _seen(future: asyncio.Future) -> None:
    """Retrieve a reply nobody awaits (a failure is the caller's to ignore)."""
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
        # a filtering reader (see the module doc): the view of the outbox's head it shares
        # with the process's other filtering readers of it (from its first take on); the
        # head's items it judged (wanted or not); `changed`: set when it waits and the view
        # took items for it (`given`), or failed (or when it stops)
        self.view: HeadView | None = None
        self.judged: dict[bytes, bool] = {}
        self.changed = asyncio.Event()
        self.given: asyncio.Future | None = None  # the take the view asked for it as it waited
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
        # it appended settlements to the inbox since this process's router last applied
        # one of its handed ones (see `_apply_here`)
        self.appended = False
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
                reply.add_done_callback(retrieved)
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
        """A filtering reader's take: the wanted items of the head its view knows, or when
        there are none, those the view takes for it when its next looks bring some (see
        the module doc); [] when none came within POP_WAIT."""
        view = self.view
        if view is None:
            view = self.view = join_view(self)
        if view.failure is not None:  # Redis is away: the pump retries (see the module doc)
            raise view.failure
        # an item judged before is not decoded again; one gone from the head is forgotten
        judged, wants = self.judged, self._wants
        self.judged = {item: judged[item] if item in judged else wants(item) for item in view.head}
        chosen = [item for item, keep in self.judged.items() if keep][:count]
        if chosen:
            return await view.take(chosen)
        if self.stopping:
            return []
        # no await since the head was judged: the view judges what its next looks bring
        # for this reader, and takes for it what it wants (HeadView._news)
        self.changed.clear()
        view.waiting[self] = count
        try:
            async with asyncio.timeout(POP_WAIT):
                await self.changed.wait()
        except TimeoutError:  # nothing for it: the pump asks again (see the module doc)
            pass
        finally:
            view.waiting.pop(self, None)
        given, self.given = self.given, None
        if given is None:  # none came, or it stops, or the view failed
            return []
        return await given  # taken, or a take in flight when the wait ended (never dropped)

    def _wants(self, item: bytes) -> bool:
        """Whether this reader's filter wants `item` (one it cannot judge is wanted: the
        consumer sets it aside, with its reason, as it does an item it cannot read)."""
        try:
            return self.wanted(item)  # type: ignore[misc]
        except Exception:
            logger.exception("the filter of a consumer of %r failed", self.destination)
            return True

    def judge(self, items: list[bytes]) -> bool:
        """Judge `items`, new to the head, for this reader while it waits (the view calls
        it after a look); whether it wants one of them."""
        judged, wants = self.judged, False
        for item in items:
            keep = judged[item] = self._wants(item)
            wants = wants or keep
        return wants

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
        router = router_here(self.store)
        if router is not None:  # SPEC §11's co-located path: see `_apply_here`
            commands = await self._apply_here(router, commands)
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
        self.appended = True  # see `_apply_here`
        if self.worker_routing and answers[kick]:
            from xumpweb.router.tasks import route

            await sync_to_async(route.delay, thread_sensitive=False)(self.store)

    async def _apply_here(self, router: Router, commands: list[dict[str, Any]]) -> list:
        """This process routes the store (the STOMP server with XUMP_STOMP_ROUTES): the
        settlements are applied by a step made here on the event loop, committed on this
        reader's connection (runtime.Router.apply_here; engine/relay's package doc,
        "Deferred commits"), whose commit also takes their tags off the taken set; the
        stamps due go ahead of it on the same connection. Settlements reach the router in
        the consumer's order: after some went to the inbox, the next are handed to the
        router's thread, which reads the inbox first (Router.hand), until one of those was
        applied. The commands left for the inbox: none once committed; all when the
        router cannot take them now or wrote none of them (NotWritten); those whose
        commit's answer was lost are kept to send again (a settlement applied twice is
        refused the second time as stale: harmless)."""
        if self.claimed:  # written before the commit, which goes on the same connection
            try:
                (stamped,) = await self.lean.send(self._stamp())
            except redis.RedisError:
                return commands  # the inbox's way keeps them and sends them again
            stamped.add_done_callback(_seen)  # a lost stamp: the router's SWEEP makes it
        handed = [Handed(command) for command in commands]
        try:
            if self.appended:  # its settlements in the inbox go first: the router's
                # thread reads the inbox before it applies these (Router.hand's after_inbox)
                future = router.hand(handed, None, after_inbox=True)
                if future is None:
                    return commands
                await asyncio.wrap_future(future)
                self.appended = False
                return []
            outcome = await router.apply_here(handed, None)
        except NotWritten:
            return [command for command, made in zip(commands, handed, strict=True)
                    if not made.committed]  # fmt: skip
        except StoreError as problem:
            left = [command for command, made in zip(commands, handed, strict=True)
                    if not made.committed]  # fmt: skip
            self.unsent = left + self.unsent
            logger.warning("a settlement's commit failed: %s; sending it again", problem)
            if not self.closed and (self.resend_task is None or self.resend_task.done()):
                self.resend_task = asyncio.create_task(self._resend())
            return []
        return commands if outcome == NOT_HERE else []

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
        if self.blocking is not None:
            if self.taking:  # a take still waits there (stop gave up on it): dropped
                self.blocking.abort()
            else:
                await self.blocking.aclose()
            self.blocking = None
        if self.view is not None:  # the last of its readers closes the view
            view, self.view = self.view, None
            await leave_view(view, self)
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
