"""One STOMP client's session: the protocol core's actions carried out against Xump.

Theory of operation. A transport (websocket.py, tcp.py) owns one `StompSession` per
connection and does only I/O: it hands over what it reads (`receive_data` for a stream,
`receive_message` for one WebSocket message) and gives a `Transport` to write bytes to and
to close. The session feeds the protocol core (xumpweb/stomp/connection.py, no I/O) and
carries out the actions it returns, the same way for both transports:

* **Authenticate**: the `passcode` is an API token; on WebSocket a console session
  stands in when the passcode is empty. CONNECTED, or ERROR and close.
* **Publish** (SEND): the publish right on the queue (`access.may`), the message built as
  the HTTP API builds one (size limit, lifetime fields), then handed to the process's
  group commit (live/group_commit.py), which appends many publishes in one round trip. Its
  RECEIPT goes out once the message is durable in the inbox (a 202's promise).
* **Subscribe**: the consume right; a `selector` compiled here first, so a bad one is
  refused with its column. /queue/<d> reads destination d's outbox (live/outbox.py's
  OutboxReader, competing with every other consumer of d; a selector picks the items it
  wants and leaves the others); /topic/<pattern> first builds a private queue
  (topics.py). One pump task per subscription takes at most `credit` (prefetch) items,
  hands each to the core for its MESSAGE frame and writes them in one write.
* **Settle** (ACK/NACK): confirms or rejects (requeue, or with NACK `requeue:false` dead
  letters) through the OutboxReader; each settled delivery opens the subscription's
  window by one.
* **Unsubscribe** and the end of the connection give back every delivery not settled
  (requeue, redelivered to the others) and take a topic's private queue down. What the
  pump's last take brought after the subscription ended was never sent: it goes back to
  the head of the outbox untaken, in order, not as redeliveries (OutboxReader.untake).

Answers (RECEIPT, ERROR of a failed action) go out in the order of the frames that asked
for them: each action that answers takes a slot in a FIFO and a writer task sends the
slots whose answer is known from the head (a `Barrier`, DISCONNECT's receipt, waits for
everything before it). MESSAGE frames do not wait behind them. A `Close` is a slot too:
what was answered before it goes out first. A frame the session refuses (a right, a
selector, a size) ends the connection as the core's own errors do: the frames the core
parsed after it in the same batch are not carried out.

Heart-beats as negotiated: a newline when nothing was written for the agreed interval; a
client silent for twice its interval is gone (its deliveries go back). A client that has
not completed its CONNECT within XUMP_STOMP_CONNECT_WAIT seconds is closed.

**Redis away** (killed, restarting, unreachable). A subscription's pump whose take fails
tells the client nothing and tries again every POP_WAIT; heart-beats go on. So an outage
shorter than STORE_AWAY is ridden out: once Redis answers, what waits in the outbox comes (a
restart on its AOF keeps every publish a RECEIPT confirmed), and the ACKs given meanwhile
are sent again (outbox.py). When Redis stays away, the **store watch** ends the session: one
task per process (store_watch.py, while it has subscriptions) that looks every LOOK_EVERY at
two times each subscription keeps, when its first failed take of a run was asked
(`away_since`) and when its take in flight was (`asked`, None between takes, for a Redis
that takes the connection and never answers: past POP_WAIT + STORE_AWAY). Past STORE_AWAY it
sends an ERROR `store unavailable` whose body names Redis and how long it has not answered,
and the connection closes: at most STORE_AWAY (plus a look) after the take that first failed
was asked. The ERROR goes at once, not behind answers that wait on Redis (a SEND's RECEIPT)
nor behind the input lock: those may never come (each is lost with the connection, as when a
socket breaks). Its deliveries the client had not acknowledged cannot be given back while
Redis is away: the delivery timeout returns them to the destination's consumers once it is
back (SPEC §7: nothing a RECEIPT confirmed is lost). A session with no subscription asks
nothing of Redis until its next frame: a SEND then is refused (ERROR `store unavailable`,
the group commit's); nor does a subscription whose window is full (prefetch reached), until
the client's ACK or NACK opens it and its pump takes again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import redis
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings

from engine.errors import (
    InvalidSelector,
    MessageTooLarge,
    NotFound,
    StoreError,
    XumpError,
)
from engine.filters import compile_filter
from engine.message import _EMPTY_HEADERS as EMPTY_HEADERS
from engine.message import Delivery, Message
from engine.relay import delivery_from_json
from engine.relay.trace import TRACE, stamped
from engine.validation import check_optional_seconds
from xumpweb import access, metrics, redis_clients
from xumpweb.live import registry, store_watch
from xumpweb.live.group_commit import Pending, RouterAnswers, group_commit
from xumpweb.live.outbox import MAX_POP, POP_WAIT, OutboxReader, home
from xumpweb.live.publish import Forbidden, error_code
from xumpweb.live.security import find_token, unwatch, user_principal, watch
from xumpweb.live.store_watch import STORE_AWAY
from xumpweb.live.tracing import trace_later, traces_sent
from xumpweb.runtime import service
from xumpweb.stomp.connection import (
    Action,
    Authenticate,
    Barrier,
    Close,
    Commit,
    Publish,
    Send,
    Settle,
    StompConfig,
    StompConnection,
    Subscribe,
    TempQueue,
    Unsubscribe,
)
from xumpweb.stompgate import clients, exchanges, mailboxes, topics

logger = logging.getLogger("xump.stomp")

HEARTBEAT = b"\n"
WRITE_BYTES = 64 * 1024  # MESSAGE frames joined into one write (one WebSocket message)
SERVER_NAME = "Xump/1.0"
# about how many bytes one take of a subscription's pump may hold: a client that does not
# read then holds the server to this (and its socket's buffers), not to prefetch times body size
TAKE_BYTES = 1024 * 1024
FIRST_TAKE = 16  # items in a pump's first take, before it knows how large they are


class Transport(Protocol):
    """What a session needs of its connection."""

    async def write(self, data: bytes) -> bool:
        """Write bytes (whole frames); False when the connection is gone."""

    async def close(self) -> None:
        """Close the connection (after what was written)."""


class Link:
    """What the TCP and WebSocket transports share: once `gone` (a failed write, a close,
    the peer leaving) a write answers False and a close does nothing. A subclass says how
    to put bytes on its wire (`_put`, raising one of `lost` when the peer is gone) and how
    to shut it (`_shut`)."""

    gone: bool
    lost: tuple[type[BaseException], ...] = ()

    async def _put(self, data: bytes) -> None:
        raise NotImplementedError

    async def _shut(self) -> None:
        raise NotImplementedError

    async def write(self, data: bytes) -> bool:
        if self.gone:
            return False
        try:
            await self._put(data)
        except self.lost:
            self.gone = True
            return False
        return True

    async def close(self) -> None:
        if self.gone:
            return
        self.gone = True
        await self._shut()


class _Slot:
    """One answer's place among the session's answers (see the module doc)."""

    __slots__ = ("actions", "barrier", "ready")

    def __init__(self, actions: list[Action] | None = None, barrier: str | None = None) -> None:
        self.actions = actions or []
        self.barrier = barrier  # a receipt to ask the core for once the slot is reached
        self.ready = actions is not None or barrier is not None


class _StompPending(Pending):
    """A SEND on its way to the inbox: its slot is answered when it is durable."""

    __slots__ = ("receipt", "session", "slot")

    def __init__(self, session: StompSession, queue: str, message: Message,
                 receipt: str | None, slot: _Slot) -> None:  # fmt: skip
        super().__init__(queue, [message])
        self.session = session
        self.receipt = receipt
        self.slot = slot

    def done(self) -> None:
        self.finished = True
        self.slot.barrier = self.receipt
        self.session.answered(self.slot)

    def fail(self, error: XumpError) -> None:
        self.finished = True
        self.session.answered(self.slot, self.session.connection.fail(
            _error_message(error), str(error), self.receipt))  # fmt: skip

    def await_router(self) -> None:
        self.session.router_answers.wait(self)


def _error_message(error: XumpError) -> str:
    """The ERROR frame's `message` for an engine error: the HTTP API's code, in words."""
    return error_code(error).replace("_", " ")


class _Subscription:
    """A live subscription: its outbox reader, window and pump."""

    def __init__(self, session: StompSession, action: Subscribe, destination: str,
                 reader: OutboxReader) -> None:  # fmt: skip
        self.session = session
        self.id = action.subscription
        self.kind = action.kind
        self.ack = action.ack
        self.destination = destination  # the outbox it reads
        # the private queue to take down at the end (a durable one stays), and the queue
        # that feeds it (the topic router, or the exchange's queue) or that it reads
        private = action.kind in ("topic", "exchange")
        self.topic_queue = destination if private and action.durable is None else None
        self.router = (action.exchange or topics.router()) if private else destination
        self.reader = reader
        reader.settle_on_claim = action.ack == "auto"  # a claim settles it (outbox.py)
        self.credit = action.credit or session.default_prefetch
        self.window_open = asyncio.Event()
        self.window_open.set()
        self.stopping = False
        self.item_size = 0  # the average size of the items of the last take
        self.registry_id = registry.new_id()
        self.since = time.time()
        # for the store watch (see the module doc): when the take in flight was asked, and
        # when the first of a run of failed takes was asked, with the last one's failure
        self.asked: float | None = None
        self.away_since: float | None = None
        self.away_problem = ""
        self.pump = asyncio.create_task(self._pump())
        self.presence = asyncio.create_task(self._presence())
        store_watch.watch(self)

    @property
    def unsettled(self) -> dict[str, None]:
        return self.reader.unsettled

    def opened(self, settled: int) -> None:
        self.credit += settled
        if self.credit > 0:
            self.window_open.set()

    async def _pump(self) -> None:
        reader, session = self.reader, self.session
        while not self.stopping:
            if self.credit <= 0:
                self.window_open.clear()
                await self.window_open.wait()
                continue
            most = TAKE_BYTES // self.item_size if self.item_size else FIRST_TAKE
            asked = self.asked = time.monotonic()
            try:
                popped = await reader.take(max(1, min(self.credit, MAX_POP, most)))
            except redis.RedisError as problem:
                popped = None
                self._take_failed(asked, problem)
            finally:
                self.asked = None
            if popped is None:
                await asyncio.sleep(POP_WAIT)
                continue
            if self.away_since is not None:
                logger.info("STOMP session %s: Redis answers again after %.1f s",
                            session.id, time.monotonic() - self.away_since)  # fmt: skip
                self.away_since = None
            if not popped:
                continue
            if self.stopping:  # it ended while the take waited: what came is not ours
                return await self._untake(popped)
            learned = time.time()
            self.item_size = max(1, sum(map(len, popped)) // len(popped))
            data: list[bytes] = []
            auto: list[str] = []
            back: list[bytes] = []
            traced: list[str] = []
            for raw in popped:
                try:
                    delivery = delivery_from_json(raw)
                    if TRACE in delivery.message.headers:  # bench-only (engine/relay/trace.py)
                        delivery = _learned(delivery, learned)
                        traced.append(delivery.message.mid)  # type: ignore[arg-type]
                    actions = session.connection.deliver(self.id, delivery)
                except Exception as problem:  # an item no frame can carry: dead letters
                    await self._set_aside(raw, problem)
                    continue
                if type(actions[0]) is not Send:  # the subscription is gone: never sent
                    back.append(raw)
                    continue
                reader.unsettled[delivery.tag] = None
                data.append(actions[0].data)
                if len(actions) > 1 and type(actions[1]) is Settle and actions[1].accept:
                    auto.extend(actions[1].tags)
            if back:
                await self._untake(back)
            if self.ack != "auto":
                self.credit -= len(data)
            for chunk in _chunks(data):
                if not await session.write(chunk):
                    return
            if traced:
                trace_later(reader.lean, session.service.store, "write", time.time(), traced)
            if auto:
                await reader.ack(auto)

    def _take_failed(self, asked: float, problem: redis.RedisError) -> None:
        """A take failed (Redis away, most likely): the pump tries again every POP_WAIT;
        the store watch ends the session if Redis stays away (see the module doc)."""
        self.away_problem = str(problem)
        if self.away_since is None:
            self.away_since = asked
            logger.warning("STOMP session %s: cannot read outbox %r: %s; trying again every "
                           "%g s, for %g s at most", self.session.id, self.reader.outbox,
                           problem, POP_WAIT, STORE_AWAY)  # fmt: skip

    def silent(self, now: float) -> tuple[float, str] | None:
        """How long Redis has not answered this subscription and why, once that is past
        the bound (see the module doc); else None."""
        return store_watch.silence(now, self.away_since, self.away_problem, self.asked)

    def store_gone(self, silent: float, problem: str) -> None:
        """The store watch: Redis has not answered this subscription for too long."""
        self.session.store_gone(self, silent, problem)

    async def _untake(self, items: list[bytes]) -> None:
        """Items taken after the subscription ended (UNSUBSCRIBE, DISCONNECT, a closed
        socket while the take waited) go back to the head of the outbox as they were:
        the next subscriber receives them first, in order, not as redeliveries."""
        try:
            await self.reader.untake(items)
        except redis.RedisError as problem:  # then close() rejects them: requeued
            logger.warning("cannot put %d item(s) back in %r: %s", len(items),
                           self.reader.outbox, problem)  # fmt: skip
            for raw in items:
                self.reader.unsettled[delivery_from_json(raw).tag] = None

    async def _set_aside(self, raw: bytes, problem: Exception) -> None:
        reason = f"the delivery cannot be sent as a STOMP frame: {type(problem).__name__}"
        logger.warning("delivery for %r set aside: %s", self.destination, problem)
        try:
            tag = delivery_from_json(raw).tag
        except Exception:
            return  # nothing to settle by: not an item the router wrote
        await self.reader.reject([tag], requeue=False, detail=reason)

    async def _presence(self) -> None:
        if await self.reader.presence(self.info):
            await self.session.closed_by_operator()

    def info(self, acks_per_second: float = 0.0) -> registry.Info:
        session = self.session
        return self.reader.info(self.registry_id, session.kind, session.who, session.remote,
                                self.since, self.credit, acks_per_second)  # fmt: skip

    async def stop(self) -> None:
        """Stop taking, give back what is unsettled, take a topic's queue down."""
        if self.stopping:
            return
        self.stopping = True
        store_watch.unwatch(self)
        self.window_open.set()
        await self.reader.stop(self.pump, self.registry_id)
        if asyncio.current_task() is not self.presence:
            self.presence.cancel()
        if self.topic_queue is not None:
            try:
                await topics.close_topic(self.session.service, self.topic_queue, self.router)
            except XumpError as problem:  # the sweep takes it down later
                logger.warning("cannot remove topic queue %r: %s", self.topic_queue, problem)


class StompSession:
    """One client connection's STOMP session (see the module doc). `kind` names the
    transport ("stomp-tcp", "stomp-websocket"); `user`: the console session's user, if
    any (WebSocket)."""

    def __init__(self, transport: Transport, kind: str, remote: str = "",
                 user: Any = None) -> None:  # fmt: skip
        self.transport = transport
        self.kind = kind
        self.remote = remote
        self.session_user = user
        self.connection = StompConnection(
            StompConfig(
                server=SERVER_NAME,
                heartbeat=(settings.XUMP_STOMP_HEARTBEAT_MS, settings.XUMP_STOMP_HEARTBEAT_MS),
                max_frame_size=max(settings.XUMP_MAX_BODY + 64 * 1024, 1024 * 1024),
            )
        )
        self.service = service()
        self.default_prefetch = settings.XUMP_STOMP_PREFETCH
        self.max_body = settings.XUMP_MAX_BODY
        self.id = registry.new_id()
        self.who = ""
        self.principal: access.Principal | None = None
        self.secret: str | None = None
        self.user: Any = None
        self.rights: dict[tuple[str, str], bool] = {}
        self.subscriptions: dict[str, _Subscription] = {}
        self.topic_serial = 0
        self.mailboxes: set[str] = set()  # /queue/ names this connection asked about
        self.exchanges: set[str] = set()  # /exchange/ names found (exchanges.py)
        self.temp_queues: list[str] = []  # its /temp-queue/ queues, removed at the end
        self.client_id: str | None = None  # CONNECT's client-id, held in Redis while here
        self.slots: deque[_Slot] = deque()
        self.wake = asyncio.Event()
        self.answered_now = asyncio.Event()  # set whenever a slot is answered
        self.router_answers = RouterAnswers()
        self.store_clients: dict[str, aioredis.Redis] = {}  # store -> a client of its server
        self.closed = False
        self.finished = False
        self.refused = False  # a frame was refused: the connection ends, nothing more is done
        self.last_read = self.last_written = time.monotonic()
        self.tasks: list[asyncio.Task] = [
            asyncio.create_task(self._write_answers()),
            asyncio.create_task(self._await_connect()),
        ]
        self.lock = asyncio.Lock()  # one batch of input at a time

    # -- input from the transport ------------------------------------------------------------
    async def receive_data(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        async with self.lock:
            await self._run(self.connection.receive_data(data))

    async def receive_message(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        async with self.lock:
            await self._run(self.connection.receive_message(data))

    async def _run(self, actions: list[Action]) -> None:
        if not actions:
            return
        started = time.perf_counter()
        counts: dict[str, int] = {}
        gathered: list[str] = []  # tags of a run of plain ACKs of one subscription
        for index, action in enumerate(actions):
            kind = type(action)
            if self.refused and kind is not Send and kind is not Close:
                continue  # frames after a refused one, parsed in the same batch: not done
            if kind is Commit:  # all or nothing: refused before any of its frames is done
                size, receipt = action.size, action.receipt  # type: ignore[union-attr]
                problem = await self._commit_problem(actions[index + 1 : index + 1 + size])
                if problem is not None:
                    self._answer(self._refusal(self.connection.fail(
                        _error_message(problem), str(problem), receipt)))  # fmt: skip
                continue
            name = kind.__name__
            counts[name] = counts.get(name, 0) + 1
            if kind is Send:
                self._answer([action])
            elif kind is Publish:
                # a /queue/ this connection already asked about needs nothing first (most
                # SENDs): no coroutine to make and await
                known = action.queue in self.mailboxes and action.exchange is None  # type: ignore[union-attr]
                if known or await self._send_target(action):  # type: ignore[arg-type]
                    self._publish(action)  # type: ignore[arg-type]
            elif kind is Settle:
                if _same_ack(action, actions, index + 1):  # type: ignore[arg-type]
                    gathered.extend(action.tags)  # type: ignore[union-attr]
                    continue
                if gathered:  # the last of a run of plain ACKs: all of them in one
                    gathered.extend(action.tags)  # type: ignore[union-attr]
                    action = action._replace(tags=tuple(gathered))  # type: ignore[union-attr]
                    gathered = []
                await self._settle(action)  # type: ignore[arg-type]
            elif kind is Subscribe:
                if await self._subscribe_target(action):  # type: ignore[arg-type]
                    await self._subscribe(action)  # type: ignore[arg-type]
            elif kind is Unsubscribe:
                await self._unsubscribe(action)  # type: ignore[arg-type]
            elif kind is Barrier:
                # a COMMIT's or DISCONNECT's receipt: the ACKs before it in the inbox first
                for sub in self.subscriptions.values():
                    await sub.reader.flush_acks()
                self._add_slot(_Slot(barrier=action.receipt))  # type: ignore[attr-defined]
            elif kind is Close:
                self._answer([action])
            elif kind is Authenticate:
                await self._authenticate(action)  # type: ignore[arg-type]
            elif kind is TempQueue:
                await self._temp_queue(action)  # type: ignore[arg-type]
        # counted per batch of input, not per action: a labelled inc costs ~1 us
        metrics.stomp_actions(self.kind, counts, time.perf_counter() - started)

    def _refusal(self, actions: list[Action]) -> list[Action]:
        """The ERROR (and Close) of a frame this session refused; `_run` carries out
        nothing after it (the core may have parsed more frames of the same batch)."""
        self.refused = True
        return actions

    # -- answers, in order ------------------------------------------------------------------
    def _answer(self, actions: list[Action]) -> None:
        self._add_slot(_Slot(actions))

    def _add_slot(self, slot: _Slot) -> None:
        self.slots.append(slot)
        if slot.ready:
            self.wake.set()

    def answered(self, slot: _Slot, actions: list[Action] | None = None) -> None:
        if actions is not None:
            slot.actions = actions
        slot.ready = True
        self.wake.set()
        self.answered_now.set()

    async def _write_answers(self) -> None:
        slots, connection = self.slots, self.connection
        while True:
            await self.wake.wait()
            self.wake.clear()
            out: list[bytes] = []
            close = False
            while slots and slots[0].ready and not close:
                slot = slots.popleft()
                actions = slot.actions
                if slot.barrier is not None:
                    actions = actions + connection.receipt_done(slot.barrier)
                for action in actions:
                    if type(action) is Send:
                        out.append(action.data)
                    elif type(action) is Close:
                        close = True
                        break
            if out and not await self.write(b"".join(out)):
                return
            if close:
                await self._close()
                return

    async def write(self, data: bytes) -> bool:
        if self.closed:
            return False
        self.last_written = time.monotonic()
        if await self.transport.write(data):
            return True
        self.closed = True
        return False

    # -- authentication -------------------------------------------------------------------------
    async def _authenticate(self, action: Authenticate) -> None:
        principal = None
        if action.passcode:
            token = await find_token(action.passcode)
            if token is None:
                return self._answer(
                    self._refusal(self.connection.refuse("unknown or revoked token"))
                )
            principal = access.for_token(token)
            self.secret = action.passcode
            self.who = f"token:{token.name}"
        elif self.session_user is not None:
            principal = await user_principal(self.session_user)
            self.user = self.session_user
            self.who = self.session_user.get_username()
        else:
            return self._answer(self._refusal(self.connection.refuse(
                "give an API token as the passcode header (login may be anything)")))  # fmt: skip
        client_id = action.headers.get("client-id")
        if client_id is not None and not await clients.claim(self, client_id):
            return self._answer(self._refusal(self.connection.refuse_as(
                "client-id in use", f"another connection is connected with client-id "
                f"{client_id!r}; one connection per client-id")))  # fmt: skip
        self.principal = principal
        watch(self)
        actions = self.connection.accept(principal, session=self.id)
        self.tasks.append(asyncio.create_task(self._heartbeats()))
        await self._run(actions)

    async def _await_connect(self) -> None:
        """Close a client that has not completed its CONNECT in XUMP_STOMP_CONNECT_WAIT
        seconds (a slowloris, a port scanner): it holds a socket and a session for nothing."""
        wait = settings.XUMP_STOMP_CONNECT_WAIT
        await asyncio.sleep(wait)
        async with self.lock:
            if self.principal is None and not self.closed:
                detail = f"no CONNECT frame arrived within {wait:g} seconds"
                self._answer(self._refusal(self.connection.fail("no CONNECT", detail)))

    async def recheck(self) -> None:
        """A token or a role changed somewhere (security.watch): close unless this
        session's token or user still holds every right it uses."""
        if self.closed or self.principal is None:
            return
        if self.secret is not None:
            token = await find_token(self.secret)
            if token is None:
                return await self._fail("access revoked", "the token was revoked")
            principal = access.for_token(token)
        else:
            principal = await user_principal(self.user, fresh=True)
        self.principal = principal
        self.rights.clear()
        for sub in list(self.subscriptions.values()):
            queue = sub.router
            if sub.kind != "temp" and not self._may("consume", queue):
                return await self._fail("access revoked", f"no consume right on {queue!r} now")

    def _may(self, right: str, queue: str) -> bool:
        allowed = self.rights.get((right, queue))
        if allowed is None:
            allowed = self.rights[right, queue] = access.may(self.principal, right, queue)  # type: ignore[arg-type]
        return allowed

    async def _fail(self, message: str, detail: str) -> None:
        async with self.lock:
            self._answer(self.connection.fail(message, detail))

    def store_gone(self, sub: _Subscription, silent: float, problem: str) -> None:
        """Redis has not answered `sub` for `silent` seconds, past STORE_AWAY (the store
        watch): an ERROR naming it, and the connection ends. Not behind the input lock, nor
        behind answers that wait on Redis (a SEND's RECEIPT): those may never come, and
        the end must (each is lost with the connection, its outcome unknown, as when a
        socket breaks)."""
        if self.closed:
            return
        for slot in self.slots:
            slot.ready = True
        self.wake.set()
        if self.refused:  # its ERROR is on its way already: it goes now
            return
        logger.warning("STOMP session %s: Redis has not answered for %.1f s (the limit is "
                       "%g s): %s; ERROR sent, the connection ends", self.id, silent,
                       STORE_AWAY, problem)  # fmt: skip
        detail = (
            f"Redis, the message store, has not answered for {silent:.1f} s while reading "
            f"{sub.destination!r} ({problem}); a connection ends after {STORE_AWAY:g} s "
            "without it. Deliveries not acknowledged are delivered again once Redis is back "
            "(at the delivery timeout at the latest); connect again to go on"
        )
        self._answer(self._refusal(self.connection.fail("store unavailable", detail)))

    async def closed_by_operator(self) -> None:
        await self._fail("closed by an operator", "an operator closed this connection; its "
                         "deliveries go back to the other consumers")  # fmt: skip

    # -- SEND ----------------------------------------------------------------------------------
    def _publish(self, action: Publish) -> None:
        slot = _Slot()
        self._add_slot(slot)
        try:
            queue, message = self._checked(action)
        except XumpError as error:
            self.answered(slot, self._refusal(self.connection.fail(
                _error_message(error), str(error), action.receipt)))  # fmt: skip
            return
        group_commit().submit(_StompPending(self, queue, message, action.receipt, slot))

    async def _mailbox(self, name: str, right: str, receipt: str | None) -> bool:
        """/queue/<name>: make the mailbox <name> when it is missing and the caller may
        manage it (mailboxes.py) and do what it came for (`right`: publish or consume; a
        SEND or SUBSCRIBE refused for want of it leaves nothing behind); asked once per
        name and connection, once it is known made or there, and not at all when the
        wiring (read as every request reads it) has the queue: a first SEND to a queue
        that exists needs no router call (it waited for one, and for a router held
        still). When the store cannot be asked (Redis away) a SUBSCRIBE is refused (ERROR
        `store unavailable`: its RECEIPT would promise a subscription nothing delivers
        to) and a SEND meets its own error (the append is refused too); the next frame
        that names it asks again."""
        if name in self.mailboxes or mailboxes.is_private(name):
            return True
        try:
            there = name in await sync_to_async(self.service.queue_names, thread_sensitive=False)()
        except (StoreError, redis.RedisError):  # Redis away: as when the router is asked
            there = False
        if there:  # no router call on the SEND's way
            self.mailboxes.add(name)
            return True
        if self._may("manage", name) and self._may(right, name):
            try:
                await mailboxes.ensure(self.service, name, self.who)
            except StoreError as problem:
                if right != "consume":
                    return True
                self._answer(self._refusal(self.connection.fail(
                    _error_message(problem), str(problem), receipt)))  # fmt: skip
                return False
        self.mailboxes.add(name)
        return True

    async def _send_target(self, action: Publish) -> bool:
        """What a SEND's destination needs first: a mailbox, the topic router, an exchange;
        False when it is refused (the ERROR is sent)."""
        if action.exchange is not None:
            return await self._exchange(action.exchange, "publish", action.receipt)
        if action.queue is None:
            await self._topic_router()
        else:
            await self._mailbox(action.queue, "publish", action.receipt)
        return True

    async def _subscribe_target(self, action: Subscribe) -> bool:
        """The same for a SUBSCRIBE's: a mailbox, an exchange."""
        if action.kind == "queue":
            return await self._mailbox(action.destination, "consume", action.receipt)
        if action.kind == "exchange" and action.exchange is not None:
            return await self._exchange(action.exchange, "consume", action.receipt)
        return True

    async def _exchange(self, name: str, right: str, receipt: str | None) -> bool:
        """/exchange/<name> (exchanges.py): False, with the ERROR sent, when there is no
        such exchange; amq.direct and amq.fanout are made when first needed by a caller
        with the right (without it, the SEND or SUBSCRIBE is refused as usual)."""
        if name in self.exchanges:
            return True
        names: frozenset[str] = frozenset()
        if name not in exchanges.BUILT_IN:
            names = await sync_to_async(self.service.queue_names, thread_sensitive=False)()
        why = exchanges.missing(name, names)
        if why is not None:
            self._answer(self._refusal(self.connection.fail(exchanges.NOT_FOUND, why, receipt)))
            return False
        if name in exchanges.BUILT_IN:
            if not self._may(right, name):
                return True
            try:
                await topics.ensure_router(self.service, name)
            except XumpError as problem:  # the SEND or SUBSCRIBE meets its own error
                logger.warning("cannot make the exchange %r: %s", name, problem)
                return True
        self.exchanges.add(name)
        return True

    async def _topic_router(self) -> None:
        """SEND /topic/: the router must exist before the publish (topics.py); when it
        cannot be made, the publish fails with its own error."""
        if not self._may("publish", topics.router()):
            return
        try:
            await topics.ensure_router(self.service)
        except XumpError as problem:
            logger.warning("cannot make the topic router %r: %s", topics.router(), problem)

    def _checked(self, action: Publish) -> tuple[str, Message]:
        """The queue a SEND publishes to and its message; the XumpError refusing it.

        Another connection's private queues: a /temp-queue/ one takes a SEND from anyone
        connected, as RabbitMQ's reply queues do (its name, with the owner's random
        connection id, came in a reply-to: holding it is the right to reply, so a token
        scoped to its own queues can answer a request); one of its topic subscriptions
        (`stomp:<connection>:<n>`) only from a caller who may manage it (an operator)."""
        queue = action.queue if action.queue is not None else topics.router()
        private = topics.private_owner(queue)
        if private is not None and private[0] != self.id:
            if private[1]:
                return queue, self._message(action)
            if not self._may("manage", queue):
                raise Forbidden(
                    f"queue {queue!r} is another connection's topic subscription: only a "
                    "caller who may manage it sends there"
                )
        if not self._may("publish", queue):
            raise Forbidden(f"this caller may not publish on queue {queue!r}")
        return queue, self._message(action)

    async def _commit_problem(self, actions: list[Action]) -> XumpError | None:
        """What refuses one of a COMMIT's SENDs, if anything does: a right, a body, or a
        destination that is not there and that this caller may not make (a /queue/ it may
        not manage, an exchange that does not exist), which would refuse that SEND after
        the ones before it were published."""
        names: frozenset[str] | None = None
        for action in actions:
            if type(action) is not Publish:
                continue
            try:
                queue, _ = self._checked(action)  # type: ignore[arg-type]
            except XumpError as error:
                return error
            exchange = action.exchange  # type: ignore[union-attr]
            plain = action.queue is not None and exchange is None  # type: ignore[union-attr]
            if (plain and (queue in self.mailboxes or mailboxes.is_private(queue))) or (
                exchange is not None and exchange in self.exchanges
            ):
                continue
            if not plain and exchange is None:
                continue  # the topic router: made when missing
            if names is None:
                try:
                    names = await sync_to_async(self.service.queue_names, thread_sensitive=False)()
                except (StoreError, redis.RedisError) as problem:
                    return StoreError(f"cannot check the transaction's queues: {problem}")
            if exchange is not None:
                why = exchanges.missing(exchange, names)
                if why is not None:
                    return NotFound(why)
            elif queue not in names and not self._may("manage", queue):
                return NotFound(f"queue {queue!r} does not exist")
        return None

    def _message(self, action: Publish) -> Message:
        if len(action.body) > self.max_body:
            raise MessageTooLarge(
                f"message body is {len(action.body)} bytes; the limit is {self.max_body} bytes"
            )
        ttl = None
        if action.expires:
            # absolute, as the client's clock has it. The engine counts a ttl from the
            # message's timestamp, which the router sets when it arrives (its due time when
            # delayed): a ttl of 0 expires it then, never delivered
            ttl = max(action.expires - time.time() - (action.delay or 0.0), 0.0)
            check_optional_seconds("ttl", ttl)
        headers = action.headers or EMPTY_HEADERS
        if TRACE in headers:  # bench-only (engine/relay/trace.py)
            headers = stamped(headers, "recv")
        if action.delay is None and ttl is None:
            return Message(action.address, headers, action.body, action.return_address)
        return Message(action.address, headers, action.body, action.return_address,
                       ttl=ttl, delay=action.delay)  # fmt: skip

    # -- SUBSCRIBE / UNSUBSCRIBE / ACK / NACK --------------------------------------------------
    async def _subscribe(self, action: Subscribe) -> None:
        # /queue/: the destination read; else the queue feeding a private one (an
        # exchange's, or the topic router)
        queue = action.destination if action.kind == "queue" else action.exchange or topics.router()
        if action.kind == "queue" and self._foreign(action.destination):
            return self._answer(self._refusal(self.connection.refuse_subscription(
                action.subscription, f"{action.destination!r} is another connection's "
                "private queue", receipt=action.receipt)))  # fmt: skip
        if action.kind != "temp" and not self._may("consume", queue):
            what = {"queue": "destination", "exchange": "exchange queue"}.get(
                action.kind, "topic router queue"
            )
            return self._answer(self._refusal(self.connection.refuse_subscription(
                action.subscription, f"this caller may not consume from {what} {queue!r}",
                receipt=action.receipt)))  # fmt: skip
        wanted = None
        if action.selector is not None:
            try:
                selects = compile_filter(action.selector)
            except InvalidSelector as error:
                return self._answer(self._refusal(self.connection.refuse_subscription(
                    action.subscription, str(error), column=error.column or 1,
                    receipt=action.receipt)))  # fmt: skip
            if action.kind not in ("topic", "exchange"):
                wanted = _wanted(selects)
        destination = action.destination
        if action.kind in ("topic", "exchange"):
            await self._earlier_sends_stored()
            if action.durable is not None:
                owner = topics.durable_owner(self.who, self.client_id)
                destination = topics.durable_name(owner, action.durable)
            else:
                self.topic_serial += 1
                destination = topics.queue_name(self.id, self.topic_serial)
            exchange = action.exchange
            try:
                await topics.open_topic(
                    self.service, destination, action.destination, action.selector,
                    action.durable is not None, source=queue,
                    operator=exchanges.operator(exchange) if exchange else "topic",
                    make_router=exchange is None or exchange in exchanges.BUILT_IN,
                )  # fmt: skip
            except XumpError as error:
                column = getattr(error, "column", None)
                refused = self.connection.refuse_subscription(
                    action.subscription, str(error), column=column, receipt=action.receipt
                )
                return self._answer(self._refusal(refused))
        found = await home(self.service, destination)
        reader = OutboxReader(found, self.client_of(found.store), destination,
                              self._store_problem, wanted)  # fmt: skip
        sub = _Subscription(self, action, destination, reader)
        self.subscriptions[action.subscription] = sub
        metrics.subscriber_joined(sub)
        if action.receipt is not None:
            self._add_slot(_Slot(barrier=action.receipt))

    async def _earlier_sends_stored(self) -> None:
        """Wait until the SENDs this connection made before are in the inbox (or refused):
        a /topic/ subscription is wired by a router call, which would otherwise overtake
        them and receive a message sent before it (frames of a connection act in order)."""
        pending = [slot for slot in self.slots if not slot.ready]
        while pending:
            self.answered_now.clear()
            pending = [slot for slot in pending if not slot.ready]
            if pending:
                await self.answered_now.wait()

    def _foreign(self, destination: str) -> bool:
        """A private queue (topic or temp) of another connection: nobody else reads it."""
        return destination.startswith(topics.PREFIX) and not destination.startswith(
            f"{topics.PREFIX}{self.id}:"
        )

    async def _temp_queue(self, action: TempQueue) -> None:
        """/temp-queue/<name>'s first use: the private queue (delivering to the destination
        of its name), and its reader when no SUBSCRIBE reads it (replies to a reply-to)."""
        try:
            await sync_to_async(self.service.call, thread_sensitive=False)(
                "stomp_mailbox", name=action.queue
            )
        except XumpError as error:
            return self._answer(self._refusal(self.connection.fail(
                _error_message(error), str(error))))  # fmt: skip
        self.temp_queues.append(action.queue)
        if action.reader is not None:
            await self._subscribe(Subscribe(action.reader, "temp", action.queue, "auto"))

    def client_of(self, store: str) -> aioredis.Redis:
        """This session's asyncio client of the Redis server holding `store`'s keys (one
        per store, made when first needed, closed with the session)."""
        found = self.store_clients.get(store)
        if found is None:
            found = self.store_clients[store] = redis_clients.for_store(store)
        return found

    async def _store_problem(self, detail: str) -> None:
        logger.warning("STOMP session %s: %s", self.id, detail)

    async def _unsubscribe(self, action: Unsubscribe) -> None:
        sub = self.subscriptions.pop(action.subscription, None)
        if sub is not None:
            await sub.stop()
        if action.durable is not None:  # UNSUBSCRIBE durable:true: the queue goes too
            owner = topics.durable_owner(self.who, self.client_id)
            queue = topics.durable_name(owner, action.durable)
            try:
                if sub is not None:
                    await topics.close_topic(self.service, queue, sub.router)
                else:  # its subscriber is away: which router fed it is not known here
                    await topics.remove_private(self.service, queue)
            except XumpError as problem:
                logger.warning("cannot remove durable subscription %r: %s", queue, problem)
        if action.receipt is not None:
            self._add_slot(_Slot(barrier=action.receipt))

    async def _settle(self, action: Settle) -> None:
        sub = self.subscriptions.get(action.subscription)
        if sub is not None:
            tags = list(action.tags)
            if action.accept:
                await sub.reader.ack(tags)
            else:
                await sub.reader.reject(tags, requeue=action.requeue)
            if sub.ack != "auto":
                sub.opened(len(tags))
            if action.receipt is not None:
                await sub.reader.flush_acks()
        if action.receipt is not None:
            self._add_slot(_Slot(barrier=action.receipt))

    # -- heart-beats and the end ------------------------------------------------------------
    async def _heartbeats(self) -> None:
        send_ms, receive_ms = self.connection.heartbeat
        if not send_ms and not receive_ms:
            return
        every = min(x for x in (send_ms, receive_ms) if x) / 1000 / 2
        while not self.closed:
            await asyncio.sleep(every)
            now = time.monotonic()
            if receive_ms and now - self.last_read > 2 * receive_ms / 1000:
                logger.info("STOMP session %s: no heart-beat from the client", self.id)
                await self._close()
                return
            if send_ms and now - self.last_written >= send_ms / 1000:
                await self.write(HEARTBEAT)

    async def _close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.transport.close()
        await self.finish()

    async def finish(self) -> None:
        """The connection ended (the transport calls this): give back what is unsettled,
        take the topic queues down, stop the tasks. Once."""
        self.closed = True
        if self.finished:
            return
        self.finished = True
        unwatch(self)
        self.router_answers.close()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        subs, self.subscriptions = list(self.subscriptions.values()), {}
        await asyncio.gather(*(sub.stop() for sub in subs), return_exceptions=True)
        for queue in self.temp_queues:  # a temp queue's messages go with its connection
            try:
                await topics.close_topic(self.service, queue)
            except XumpError as problem:  # the sweep takes it down later
                logger.warning("cannot remove temp queue %r: %s", queue, problem)
        await clients.release(self)
        if self.store_clients:
            await traces_sent()  # a traced frame's "write" line goes out on these clients
            for client in self.store_clients.values():
                await client.aclose()


def _same_ack(action: Settle, actions: list[Action], after: int) -> bool:
    """The action at `after` is, like `action`, a plain ACK (no receipt) of the same
    subscription: a client ACKing each MESSAGE sends many in one read, and they are
    settled as one (one pass through the outbox reader instead of one each)."""
    if not action.accept or action.receipt is not None or after >= len(actions):
        return False
    following = actions[after]
    return (
        type(following) is Settle
        and following.accept
        and following.receipt is None
        and following.subscription == action.subscription
    )


def _learned(delivery: Delivery, at: float) -> Delivery:
    """A traced delivery with the time its subscriber's process took it (learn=)."""
    message = delivery.message
    return delivery._replace(
        message=message._replace(headers=stamped(message.headers, "learn", at))
    )


def _chunks(frames: list[bytes]) -> list[bytes]:
    """Frames joined into writes of at most WRITE_BYTES (a bigger frame alone): one write
    is one WebSocket message, and clients limit those (Python's websockets: 1 MiB)."""
    chunks: list[bytes] = []
    start = size = 0
    for end, frame in enumerate(frames):
        if size and size + len(frame) > WRITE_BYTES:
            chunks.append(b"".join(frames[start:end]))
            start, size = end, 0
        size += len(frame)
    if size or start < len(frames):
        chunks.append(b"".join(frames[start:]))
    return chunks


def _wanted(selects: Callable[[Message], bool]) -> Callable[[bytes], bool]:
    """An outbox item filter from a compiled selector (an unreadable item is wanted: the
    pump then sets it aside with its reason)."""

    def wanted(raw: bytes) -> bool:
        try:
            return selects(delivery_from_json(raw).message)
        except Exception:
            return True

    return wanted
