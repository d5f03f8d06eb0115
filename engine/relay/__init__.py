"""Sharing a Redis store between processes: one routes (the router), the others relay.

Theory of operation: the process holding a Redis store's lease (see stores/redis.py) is its
**router** and the only one running the engine on its queues. Any other process is a
**client**: it appends commands (publish, confirm, reject) to the store's durable inbox and
reads deliveries from per-destination outboxes. The router takes a batch of commands off the
head of the inbox, runs them through its engine, and writes in ONE fenced atomic step the
store's changes, the removal of those commands from the inbox and the deliveries they
caused into the outboxes. So:

* a publish that returned to a client is durable (it is in the inbox, with AOF);
* a command is applied exactly once: if the router dies before its step, nothing of the
  batch happened and the next router (after the lease expires) takes the same commands;
* a delivery reaches an outbox exactly once, in the order the router made it;
* FIFO holds across processes: the inbox is one list and one router routes.

Besides publish, confirm and reject, a client can **call** an operation the router offers
(`RelayRouter(calls=...)`: wiring changes, history pages, stats) and wait for its answer: the
call is a command like the others, so it sees every command sent before it, and its answer
is written to a reply list in the same atomic step as the changes it made. A publish whose
refusal the publisher must hear (QueueFull from a queue that would drop it) is such a call
(`publish_applied`); a plain publish the router refuses goes to the errors list.

Keys (the store's hash tag keeps them in the store's slot):
    xump:{S}:inbox                 LIST  JSON commands, oldest first
    xump:{S}:outbox:<destination>  LIST  JSON deliveries, oldest first
    xump:{S}:errors                LIST  JSON {command, error, at} for commands that failed
                                         (the newest `errors_kept`, 10,000 by default)
    xump:{S}:reply:<id>            LIST  the answer to one call, kept for a minute
    xump:{S}:taken                 ZSET  tag -> when a consumer took it off its outbox
    xump:{S}:claimed               LIST  items consumers' BLMOVEs claimed, not stamped yet
    xump:{S}:autoacked             LIST  items ack:auto consumers claimed: settled by it
    xump:{S}:revoked:<destination> SET   tags revoked while a copy may wait in the outbox
    xump:{S}:present:<destination> STRING (expiring) a consumer of the destination is here
    xump:{S}:absent                HASH  destination -> since when the router sees it away

Delivery timeouts (SPEC §7). A delivery waits in its outbox, one copy, for as long as no
consumer takes it; the timeout counts from the moment one does. Consumers take deliveries
with one Lua script (TAKE: LPOP and, in the same atomic step, ZADD of each tag into the
taken set at the server's time; scripts.py), so no delivery is ever taken unrecorded.
Settling a delivery removes its tag from the taken set (the client does it with its
confirm or reject). The router's `expire` returns the deliveries taken longer ago than the
delivery timeout (`delivery_timeout`, default 60 s) and not settled (their consumer may
have died) to their queues; they are delivered again with `redelivered` set, to the outbox,
again one copy. At-least-once, as in SPEC §7. A delivery never taken is never expired, so an
outbox of a destination nobody consumes holds one copy of each message waiting for it; it
is bounded by the credit of the DELIVER selectors feeding it (or, with unlimited credit,
by the messages of their queues), and does not grow with time.

The live path (SPEC §11): claims. A consumer with nothing to take waits in a BLMOVE of its
outbox onto the store's **claimed** list. The router's step that appends a delivery wakes
it in the same turn of Redis's event loop: the move is in the AOF with the step, under the
same fsync, and Redis answers the BLMOVE only after it. So the consumer holds the delivery
durably recorded (in the claimed list) without a write of its own that the message waits
for, and only after the step that made it is durable; the move is atomic, so one consumer
holds it. The delivery's timeout is started after the frame left, off the path: the
consumer's STAMP (claimed -> taken set, in the round trip of its next take or settlement)
or, for a consumer that died before, the router's SWEEP at each `expire` (claimed -> taken
set unless stamped: at most one expire period late, never early). Why nothing is lost and
nobody holds a delivery twice, case by case:
* a delivery is in exactly one of: its outbox, the claimed list, the taken set (with the
  consumer holding it), or settled; every move between them is one atomic Redis step;
* the consumer dies after the claim: the item stays in the claimed list (durable), the
  SWEEP stamps it, the timeout returns it to its queue (redelivered), as for a TAKE;
* Redis restarts: the claim was fsync'd with the step before the consumer had it, so it is
  either in the outbox (not yet claimed, nobody had it) or in the claimed list;
* the router dies: the claimed list is the store's, the next router sweeps it;
* a consumer whose deliveries are settled as they are sent (STOMP's `ack:auto`) claims
  onto the **autoacked** list instead: the claim is its ack. The router confirms what that
  list holds at the head of its next step, in the commit that takes the items off it
  (`_Settled`, known by its class: no inbox command can pass for one), so the ack costs no
  write of its own either, nor a ring: the service's router looks at the list at least
  every few tens of milliseconds while it routes, and after every step that leaves a
  message waiting in a queue (which may wait for the credit a claim gives back), and
  lets settlements found alone wait a moment for other work to ride with, so a message at
  a time costs one commit, not two (xumpweb/runtime.py).
  As with RabbitMQ's automatic acks, a delivery is settled once it is on its way: a
  consumer process killed between the claim and its socket write, or a subscription that
  ends while its claim waited, loses that one message to the subscriber (a claim by TAKE,
  in a burst, is acked after the write as before). Only the router takes items off the
  autoacked list (it trims as many as it read, in its commit), so nothing is put back
  there;
* revoked deliveries (below) may be claimed in the moment between the router's step and
  its PURGE: a consumer that claims while its destination has a revoked set checks the
  claim first (CLAIM_CHECK, one round trip, only then) and drops a revoked one; PURGE
  removes revoked items from the claimed list too.

The co-located path (SPEC §11's last sentence). A process that holds the lease and also
publishes (the STOMP server standing as the router, xumpweb/router/watch.py) may hand its
publishes to its own router in memory (`Handed` commands, `run_once`'s `handed`) instead of
appending them to the inbox: they are applied at the end of the router's next step, and the
step's one commit is their only durable write. Their publisher answers them (RECEIPT,
`published`) only once `committed` is true, so an answer still means durable; the
deliveries they cause reach the outboxes in that same commit, so a lone message costs one
fsync and no process hop. Why nothing is lost or applied twice: a handed command is in no
list until its step commits, so it is either committed whole with the step (and then
answered) or not at all; a step refused for a lost lease (LeaseLost: the fenced commit
wrote nothing, for certain) leaves the publisher to append the uncommitted ones to the
inbox, in order, as any client would; a step that fails otherwise (Redis away: the commit
may or may not have happened) fails them to their publishers, as a lost answer to an inbox
append would. A handed command the router refuses is set aside in the errors list like an
inbox command, so a handed publish means what an appended one means.

Deferred commits: the step on the publisher's own thread. The handed step above runs on the
router's thread, so each SEND crosses threads twice (hand over, answer back) and both
threads contend for the interpreter lock. The process may instead make the step itself, on
the thread that read the publishes (the STOMP server's event loop), and send the step's
commit on its own connection: `RedisStore.defer` makes the store record each commit's
EVALSHA instead of sending it, `sent_later` hands them over, and the caller sends them in
order and awaits the answers (xumpweb/runtime.py's Router.apply_here). Why this keeps the
promises: the engine's lock is held from the step's start until its commits' answers came
back, so no other step (the router thread's) is made on top of a state Redis does not have
yet, and Redis sees the commits in the order the engine made them; the commits are fenced
as any other (a lost lease writes nothing: LeaseLost); the publishes are answered, and the
deliveries claimed, only after the answer, so after the fsync. When a deferred commit
fails, memory holds what Redis may not: the store then refuses every later commit
(`broken`, NotWritten, nothing written) until its owner drops the engine, and with it the
lease (RedisStore.release_lease deletes it if still its own), so a router loads the store
again at once; each handed command's `committed` (and `part`:
which deferred commit applied it) says which publishes were written, so a refused one goes
to the inbox, in order, and one whose answer was lost is failed to its publisher. A step
that would roll back (a command failing with a defect rather than a refusal) would load the
engine from a store that lacks the deferred commits: it stops instead (NotWritten), nothing
of it is sent, and its commands go to the inbox, where the router's own steps apply or set
them aside one by one.

Rings that carry the commands (SPEC §11: no wait on a lone message's path). Every append to
an inbox runs one script (scripts.PUSH): it appends the commands, adds their number to the
store's **pushed** counter (`pushed_key`) in the same atomic step, and, given the store's
doorbell channel (the service's clients give it), rings it with the counter's new value and
the commands themselves (up to RING_CARRIES bytes; a bigger append rings empty). A router
that listens (the service's, xumpweb/runtime.py) then knows what was appended without
reading the inbox: one round trip fewer on the path of every message. What it knows
(`heard`, `carried`): after a read of the head (`head`: the inbox, the autoacked list and
the counter in one atomic script) that found the whole inbox, its commands and the count
they stand at; a ring whose count minus its commands' number is that count continues it
exactly (appends are atomic and counted, and a Redis server sends one subscriber its
messages in the order the appends ran), so its commands join the end; a ring at or below
the count was read with the inbox already; any other (a ring missed: the subscription
dropped; an append not counted) makes the router read the inbox again. So its steps take
the inbox's commands in the inbox's order. Why nothing is taken off wrongly even if an
append somewhere is not counted (a program of an older release, a hand-made RPUSH): the
inbox's length minus the counter stays put under counted appends and moves by what the
router takes off; every commit that takes commands off an inbox the router believes it
knows checks that number first, in its atomic step (RedisStore.expect_gap), and writes
nothing when it moved (GapMoved: the engine reloads, the router reads the inbox again, and
the commands are applied from there, once each, in order). A stalled router that lost its
lease commits nothing at all (the fence), so only the holder ever takes commands off.

Destinations away. Consumers refresh their destination's presence key every second
(PRESENCE_TTL_MS). A worker queue (Engine.worker_destinations: fed by a MOVE, all of its
selectors DELIVER) whose destinations have all been away for the delivery timeout gives its
unsettled work back to the front of the queue it came from, for the other workers of the
pack (Engine.absent). The copies of revoked deliveries still in the outbox are dropped: in
the same atomic step the router lists their tags in the destination's revoked set, which
TAKE skips, and right after it removes them from the outbox (PURGE).

Modules: wire.py (the keys and the JSON of items), scripts.py (the Lua scripts), client.py
(RelayClient: the side of every process), router.py (RelayRouter: the side of the lease
holder). The names below are the relay's public ones.
"""

from __future__ import annotations

from engine.relay.client import RelayClient, call_outcome, store_failure
from engine.relay.router import (
    EXPIRE_BATCH,
    REPLY_TTL_MS,
    TICK_EVERY,
    Call,
    Handed,
    RelayRouter,
)
from engine.relay.scripts import (
    CLAIM_CHECK,
    GUARDED_PUSH,
    PURGE,
    PUSH,
    STAMP,
    SWEEP,
    TAKE,
    TAKE_THESE,
    UNTAKE,
)
from engine.relay.wire import (
    PRESENCE_EVERY,
    PRESENCE_TTL_MS,
    RING_CARRIES,
    delivery_from_json,
    delivery_keys,
    message_json,
    pushed_key,
    relay_keys,
    ring_commands,
)

__all__ = [
    "CLAIM_CHECK",
    "EXPIRE_BATCH",
    "GUARDED_PUSH",
    "PRESENCE_EVERY",
    "PRESENCE_TTL_MS",
    "PURGE",
    "PUSH",
    "REPLY_TTL_MS",
    "RING_CARRIES",
    "STAMP",
    "SWEEP",
    "TAKE",
    "TAKE_THESE",
    "TICK_EVERY",
    "UNTAKE",
    "Call",
    "Handed",
    "RelayClient",
    "RelayRouter",
    "call_outcome",
    "delivery_from_json",
    "delivery_keys",
    "message_json",
    "pushed_key",
    "relay_keys",
    "ring_commands",
    "store_failure",
]
