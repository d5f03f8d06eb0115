"""WebSocket consumers: /ws/subscribe/<destination>/ and /ws/monitor/ (docs/websocket.md).

Theory of operation (subscribe). Each connection holds its destination's outbox through an
`OutboxReader` (xumpweb/live/outbox.py, shared with the STOMP subscriptions: taking with
the relay's TAKE script, gathered acks, rejects, presence, giving back on close) and runs
one pump task that, while the client's window is open, takes up to `credit` items, notes
them as unsettled and sends them: a frame per delivery, or frames of up to `batch`
deliveries. Connections on the same destination compete for the same list, so they share
its work by credit. Nothing crosses the Channels layer: it would cost a Redis round trip
per message. When the connection ends, every delivery it took and did not see settled,
sent or not yet sent, is rejected with requeue, in the order it was delivered: each goes
back to the head of its queue and out again (redelivered=true) to whoever subscribes.

Rules this file keeps:
* no credit, no sends: each delivery sent uses one credit; `credit` frames add to the
  window; acks do not (the client grants more credit as it finishes work);
* a take in flight is never cancelled (its items would leave the list unseen, and come
  back only at their delivery timeout): closing waits for it to return, at most POP_WAIT;
* a client settles only tags this connection sent it; a bad frame gets an error frame and
  the connection stays open;
* Redis away is said once an outage, never once a retry (below).

**Redis away** (killed, restarting, unreachable), as STOMP sessions ride it out
(xumpweb/stompgate/session.py, "Redis away"). The pump whose take fails tries again every
POP_WAIT, quietly: the client gets one `store_unavailable` error frame when the first take
of the outage fails (or when acks or rejects first cannot be sent: the reader sends them
again until Redis answers), and one `store_available` frame when a take works again; the
connection stays open and heartbeats go on, so a short outage is ridden out with nothing
lost or sent twice (what waits in the outbox comes once Redis answers, on its AOF). When
Redis stays away, the process's store watch (store_watch.py, shared with STOMP)
ends the connection STORE_AWAY after the first failed take was asked (POP_WAIT +
STORE_AWAY after a take Redis never answers): a second error frame saying so, then close
4503. Its unacked deliveries cannot be given back while Redis is away: the delivery
timeout returns them once it is back. A connection whose window is shut (credit 0) takes
nothing, so it notices nothing until its acks or its next take meet the outage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
import redis
from channels.consumer import AsyncConsumer, get_handler_name
from channels.exceptions import StopConsumer
from uvicorn.protocols.utils import ClientDisconnected

from engine.errors import InvalidName
from engine.relay.trace import TRACE, stamped
from engine.validation import check_name
from xumpweb import access, metrics, redis_clients
from xumpweb.live import monitor, registry, store_watch
from xumpweb.live.frames import Undeliverable, delivery_frame, encode
from xumpweb.live.outbox import MAX_POP, POP_WAIT, OutboxReader, home
from xumpweb.live.security import (
    find_token,
    query_number,
    query_token,
    session_user,
    unwatch,
    user_principal,
    watch,
)
from xumpweb.live.store_watch import STORE_AWAY
from xumpweb.live.tracing import trace_later, traces_sent
from xumpweb.runtime import service

logger = logging.getLogger("xump.live")

MAX_CREDIT = 100_000  # the widest window a client may open
MAX_BATCH = 1000  # the most deliveries in one "deliveries" frame
MAX_TAGS = 10_000  # tags in one ack frame
AUTH_WAIT = 10.0  # seconds a connection may stay open without authenticating
HEARTBEAT = 15.0  # seconds of silence after which the server sends a heartbeat
CLOSE_BAD_TARGET, CLOSE_UNAUTHORIZED, CLOSE_FORBIDDEN = 4400, 4401, 4403
CLOSE_BY_OPERATOR = 4000  # an operator closed the connection (the consumers page)
CLOSE_STORE_AWAY = 4503  # Redis did not answer for STORE_AWAY seconds (see the module doc)


_HEARTBEAT_FRAME = encode({"type": "heartbeat"})


class FrameError(Exception):
    """A client frame that cannot be obeyed: answered with an error frame, never a close."""

    def __init__(self, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.extra = extra


def _whole(frame: dict[str, Any], name: str, low: int, high: int, default: Any = None) -> Any:
    value = frame.get(name, default)
    if value is default and name not in frame:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise FrameError("invalid_argument", f"{name} must be a whole number from {low} to {high}")
    return value


class LayerlessConsumer(AsyncConsumer):
    """A consumer of every WebSocket here (these and STOMP's, stompgate/websocket.py): never
    the Channels layer, no layer channel (and no Redis reader) per connection, and events
    dispatched straight to their handlers."""

    channel_layer_alias = "xump-live-none"

    async def dispatch(self, message: dict[str, Any]) -> None:
        # channels' own dispatch closes stale database connections around every event, a
        # thread hop per frame; the database is used only in database_sync_to_async here
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for {message['type']!r}")
        await handler(message)


SETTLING = frozenset({"ack", "reject"})  # frames still obeyed once the client is gone


class LiveSocket(LayerlessConsumer):
    """What both consumers share: the handshake, authentication (a token in the query
    string or in a first `auth` frame, or the console's session) and the right to stay
    (re-checked whenever a token or role changes, security.watch), JSON frames whose
    mistakes are answered with error frames, and heartbeats."""

    kind = "live"
    frames: dict[str, str] = {}  # frame type -> name of the method that obeys it

    # -- the connection's life ---------------------------------------------------------------
    async def websocket_connect(self, message: dict[str, Any]) -> None:
        self.closed = False
        self.authorized = False
        self.finished = False
        self.who = ""
        self.secret: str | None = None  # the token this connection authenticated with
        self.user: Any = None  # or the console's user
        self.last_sent = time.monotonic()
        self.tasks: list[asyncio.Task] = []
        metrics.websocket_opened(self.kind)
        await self.send({"type": "websocket.accept"})
        problem = self.check_target()
        if problem is None:
            problem = self.read_options()
        if problem is not None:
            await self.fail("invalid_argument", problem, CLOSE_BAD_TARGET)
            return
        self.tasks.append(asyncio.create_task(self._heartbeats()))
        token = query_token(self.scope)
        user = session_user(self.scope)
        if token is not None:
            await self.authorize_token(token)
        elif user is not None:
            await self.authorize_user(user)
        else:
            self.tasks.append(asyncio.create_task(self._auth_deadline()))

    async def websocket_receive(self, message: dict[str, Any]) -> None:
        if self.finished:
            return
        text = message.get("text")
        if text is None:
            await self.error("bad_frame", "frames are JSON text, not binary")
            return
        try:
            frame = self.parse(text)
        except ValueError as problem:
            await self.error("bad_json", f"the frame is not JSON: {problem}")
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            await self.error("bad_frame", 'a frame is a JSON object with a "type"')
            return
        kind = frame["type"]
        if self.closed and kind not in SETTLING:
            # the client is gone (a send found it so before this frame's turn came); what
            # it settled before it went still counts: those acks and rejects are applied
            # before `finish` gives back the rest (else they came again elsewhere)
            return
        started = time.perf_counter()
        try:
            if kind == "heartbeat":
                return
            if kind == "auth":
                await self.auth_frame(frame)
                return
            method = self.frames.get(kind)
            if method is None:
                known = ", ".join(["auth", "heartbeat", *self.frames])
                raise FrameError("unknown_type", f"unknown frame type {kind!r}; known: {known}")
            if not self.authorized:
                raise FrameError("not_authenticated", 'send {"type":"auth","token":...} first')
            await getattr(self, method)(frame)
        except FrameError as problem:
            await self.error(problem.code, problem.detail, frame=kind, **problem.extra)
        finally:
            metrics.websocket_frame(self.kind, kind, time.perf_counter() - started)

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        self.closed = True
        await self.finish()
        raise StopConsumer

    async def finish(self) -> None:
        """Stop this connection's tasks and settle what it holds (once)."""
        if self.finished:
            return
        self.finished = True
        unwatch(self)
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        await self.stop()

    # -- sending -----------------------------------------------------------------------------
    async def send_text(self, text: str) -> bool:
        """Send one frame; False when the connection is gone (nothing more will be sent)."""
        if self.closed:
            return False
        try:
            await self.send({"type": "websocket.send", "text": text})
        except ClientDisconnected:
            self.closed = True
            return False
        self.last_sent = time.monotonic()
        return True

    async def error(self, code: str, detail: str, **extra: Any) -> None:
        await self.send_text(encode({"type": "error", "error": code, "detail": detail, **extra}))

    async def fail(self, code: str, detail: str, close_code: int, reason: str = "") -> None:
        """Tell the client why, then close the connection (`reason`: the close frame's)."""
        await self.error(code, detail)
        if not self.closed:
            self.closed = True
            close: dict[str, Any] = {"type": "websocket.close", "code": close_code}
            if reason:
                close["reason"] = reason
            try:
                await self.send(close)
            except ClientDisconnected:
                pass
        await self.finish()

    async def _heartbeats(self) -> None:
        while not self.closed:
            quiet = time.monotonic() - self.last_sent
            if quiet >= self.heartbeat_every:
                await self.send_text(_HEARTBEAT_FRAME)
            else:
                await asyncio.sleep(self.heartbeat_every - quiet)

    # -- authentication ----------------------------------------------------------------------
    async def auth_frame(self, frame: dict[str, Any]) -> None:
        if self.authorized:
            raise FrameError("already_authenticated", "this connection is authenticated")
        secret = frame.get("token")
        if not isinstance(secret, str):
            raise FrameError("invalid_argument", "token must be a string")
        await self.authorize_token(secret)

    async def authorize_token(self, secret: str) -> None:
        token = await find_token(secret)
        if token is None:
            await self.fail("unauthorized", "unknown or revoked token", CLOSE_UNAUTHORIZED)
        elif not self.allows(access.for_token(token)):
            await self.fail("forbidden", self.forbidden_detail(), CLOSE_FORBIDDEN)
        else:
            self.secret = secret
            await self.authorized_as(f"token:{token.name}")

    async def authorize_user(self, user: Any) -> None:
        if not self.allows(await user_principal(user)):
            await self.fail("forbidden", self.forbidden_detail(), CLOSE_FORBIDDEN)
        else:
            self.user = user
            await self.authorized_as(user.get_username())

    async def authorized_as(self, who: str) -> None:
        self.authorized = True
        self.who = who
        watch(self)
        await self.start()

    async def recheck(self) -> None:
        """A token or a role changed somewhere: close unless this connection's token or
        user still has the right (security.watch calls this)."""
        if self.closed or not self.authorized:
            return
        if self.secret is not None:
            token = await find_token(self.secret)
            if token is None:
                await self.fail("unauthorized", "the token was revoked", CLOSE_UNAUTHORIZED)
                return
            principal = access.for_token(token)
        else:
            principal = await user_principal(self.user, fresh=True)
        if not self.allows(principal):
            await self.fail("forbidden", self.forbidden_detail(), CLOSE_FORBIDDEN)

    async def _auth_deadline(self) -> None:
        await asyncio.sleep(AUTH_WAIT)
        if not self.authorized and not self.closed:
            await self.fail("unauthorized", f"no token within {AUTH_WAIT:g} s", CLOSE_UNAUTHORIZED)

    def read_options(self) -> str | None:
        """Query-string options; a problem to report, or None."""
        raw = query_number(self.scope, "heartbeat")
        self.heartbeat_every = HEARTBEAT
        if raw is not None:
            try:
                self.heartbeat_every = float(raw)
            except ValueError:
                self.heartbeat_every = 0.0
            if not 1.0 <= self.heartbeat_every <= 300.0:
                return "heartbeat must be a number of seconds from 1 to 300"
        return None

    # -- what each consumer fills in ---------------------------------------------------------
    def parse(self, text: str) -> Any:
        """A frame's JSON value; ValueError when it is not JSON."""
        return orjson.loads(text)

    def check_target(self) -> str | None:
        return None

    def allows(self, principal: access.Principal) -> bool:
        raise NotImplementedError

    def forbidden_detail(self) -> str:
        raise NotImplementedError

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError


class SubscribeConsumer(LiveSocket):
    """/ws/subscribe/<destination>/: deliveries for one destination (see the module doc)."""

    kind = "subscribe"
    frames = {"credit": "credit_frame", "ack": "ack_frame", "reject": "reject_frame"}

    def check_target(self) -> str | None:
        try:
            self.destination = check_name(
                "destination", self.scope["url_route"]["kwargs"]["destination"]
            )
        except InvalidName as problem:
            return str(problem)
        return None

    def allows(self, principal: access.Principal) -> bool:
        return access.may(principal, "consume", self.destination)

    def forbidden_detail(self) -> str:
        return f"no consume right on {self.destination!r}"

    async def start(self) -> None:
        found = await home(service(), self.destination)
        self.redis = redis_clients.for_store(found.store)
        self.reader = OutboxReader(found, self.redis, self.destination, self._store_problem)
        self.credit = 0
        self.batch = 0  # 0: a frame per delivery; n: "deliveries" frames of up to n
        self.window_open = asyncio.Event()
        self.stopping = False
        self.connection_id = registry.new_id()
        self.since = time.time()
        client = self.scope.get("client") or ("", 0)
        self.remote = f"{client[0]}:{client[1]}" if client and client[0] else ""
        # Redis away (see the module doc): when the take in flight was asked (None between
        # takes), when the first failed take of a run was, the last failure, and whether the
        # client was told the store is unavailable (and not yet that it is back)
        self.asked: float | None = None
        self.away_since: float | None = None
        self.away_problem = ""
        self.told_away = False
        self.pump = asyncio.create_task(self._pump())
        self.tasks.append(asyncio.create_task(self._presence()))
        store_watch.watch(self)
        metrics.subscriber_joined(self)  # sampled for /metrics until it stops
        await self.send_text(encode({"type": "subscribed", "destination": self.destination}))

    @property
    def unsettled(self) -> dict[str, None]:
        return self.reader.unsettled

    async def _store_problem(self, detail: str) -> None:
        """The reader cannot send acks or rejects (it sends them again until Redis answers)."""
        await self._tell_away(f"{detail}; acks and rejects are sent again once it answers")

    async def _tell_away(self, problem: str) -> None:
        """Say once an outage that Redis does not answer (see the module doc)."""
        if self.told_away:
            return
        self.told_away = True
        await self.error("store_unavailable", (
            f"Redis, the message store, does not answer ({problem}); deliveries resume once "
            f"it does, and the connection closes if it stays away {STORE_AWAY:g} s"
        ))  # fmt: skip

    async def _take_failed(self, asked: float, problem: redis.RedisError) -> None:
        """A take failed (Redis away, most likely): the pump tries again every POP_WAIT and
        the store watch ends the connection if Redis stays away (see the module doc)."""
        self.away_problem = str(problem)
        if self.away_since is None:
            self.away_since = asked
            logger.warning("cannot read outbox %r: %s; trying again every %g s, for %g s at "
                           "most", self.reader.outbox, problem, POP_WAIT, STORE_AWAY)  # fmt: skip
        await self._tell_away(f"cannot read deliveries: {problem}")

    async def _store_back(self) -> None:
        """A take worked again after Redis was away: say so, once."""
        if self.away_since is not None:
            logger.info("outbox %r: Redis answers again after %.1f s", self.reader.outbox,
                        time.monotonic() - self.away_since)  # fmt: skip
            self.away_since = None
        if self.told_away:
            self.told_away = False
            await self.send_text(encode({
                "type": "store_available",
                "detail": "Redis, the message store, answers again; deliveries resume",
            }))  # fmt: skip

    def silent(self, now: float) -> tuple[float, str] | None:
        """How long Redis has not answered this connection's takes and why, once that is
        past the bound (the store watch asks; see the module doc); else None."""
        return store_watch.silence(now, self.away_since, self.away_problem, self.asked)

    def store_gone(self, silent: float, problem: str) -> None:
        """The store watch: Redis has not answered for too long; the connection ends."""
        if self.closed or self.finished:
            return
        logger.warning("subscriber of %r: Redis has not answered for %.1f s (the limit is %g "
                       "s): %s; the connection ends", self.destination, silent, STORE_AWAY,
                       problem)  # fmt: skip
        detail = (
            f"Redis, the message store, has not answered for {silent:.1f} s ({problem}); the "
            f"connection closes after {STORE_AWAY:g} s without it. Deliveries not acked are "
            "delivered again once Redis is back (at the delivery timeout at the latest); "
            "connect again to go on"
        )
        self.tasks.append(asyncio.create_task(
            self.fail("store_unavailable", detail, CLOSE_STORE_AWAY, "store unavailable")
        ))  # fmt: skip

    async def _presence(self) -> None:
        """Tell the router this destination has a subscriber, for as long as it has, and
        the consumers registry who it is (registry.py); close when an operator asks."""
        if await self.reader.presence(self.info):
            detail = "an operator closed this connection; its deliveries go back"
            await self.fail("closed_by_operator", detail, CLOSE_BY_OPERATOR)

    def info(self, acks_per_second: float = 0.0) -> registry.Info:
        """What the consumers page shows of this connection."""
        return self.reader.info(self.connection_id, "websocket-json", self.who, self.remote,
                                self.since, self.credit, acks_per_second)  # fmt: skip

    # -- deliveries out ------------------------------------------------------------------------
    async def _pump(self) -> None:
        reader = self.reader
        while not self.stopping:
            if self.credit <= 0:
                self.window_open.clear()
                await self.window_open.wait()
                continue
            asked = self.asked = time.monotonic()
            try:
                popped = await reader.take(min(self.credit, MAX_POP))
            except redis.RedisError as problem:
                self.asked = None
                await self._take_failed(asked, problem)
                await asyncio.sleep(POP_WAIT)
                continue
            finally:
                self.asked = None
            if self.away_since is not None or self.told_away:
                await self._store_back()
            if not popped:
                continue
            learned = time.time()
            frames = []
            traced: list[str] = []
            for raw in popped:
                try:
                    frame = delivery_frame(raw)
                except Undeliverable as problem:
                    await self._set_aside(problem)
                    continue
                message = frame["message"]
                if message["headers"] and TRACE in message["headers"]:  # bench-only
                    message["headers"] = stamped(message["headers"], "learn", learned)
                    traced.append(message["mid"])
                frames.append(frame)
                reader.unsettled[frame["tag"]] = None
            self.credit -= len(frames)
            if self.stopping or not await self._send_deliveries(frames):
                return
            if traced:  # engine/relay/trace.py: the frames were handed to the socket
                trace_later(reader.lean, reader.store, "write", time.time(), traced)

    async def _set_aside(self, problem: Undeliverable) -> None:
        """A delivery no frame can carry goes to the dead letters with the reason (reject
        without requeue, `x-detail`), never to the client, never held: the pump goes on."""
        logger.warning("delivery for %r set aside: %s", self.destination, problem.reason)
        if problem.tag is None:
            return  # nothing to settle by: not an item the router wrote
        await self.reader.reject([problem.tag], requeue=False, detail=problem.reason)

    async def _send_deliveries(self, frames: list[dict[str, Any]]) -> bool:
        batch = self.batch
        if not batch:
            for frame in frames:
                if not await self.send_text(encode(frame)):
                    return False
            return True
        for start in range(0, len(frames), batch):
            items = frames[start : start + batch]
            if not await self.send_text(encode({"type": "deliveries", "items": items})):
                return False
        return True

    # -- client frames ---------------------------------------------------------------------------
    async def credit_frame(self, frame: dict[str, Any]) -> None:
        more = _whole(frame, "n", 0, MAX_CREDIT, default=0)
        batch = _whole(frame, "batch", 0, MAX_BATCH)
        if self.credit + more > MAX_CREDIT:
            raise FrameError(
                "invalid_argument",
                f"credit would reach {self.credit + more}; the window is at most {MAX_CREDIT}",
            )
        if batch is not None:
            self.batch = batch
        self.credit += more
        if self.credit > 0:
            self.window_open.set()

    async def ack_frame(self, frame: dict[str, Any]) -> None:
        unknown = await self.reader.ack(self._tags(frame))
        if unknown:
            raise FrameError(
                "unknown_tag",
                f"{len(unknown)} tag(s) were not delivered on this connection or are settled",
                tags=unknown[:20],
            )

    def _tags(self, frame: dict[str, Any]) -> list[str]:
        if "tags" in frame:
            tags = frame["tags"]
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise FrameError("invalid_argument", "tags must be a list of delivery tags")
            if len(tags) > MAX_TAGS:
                raise FrameError("invalid_argument", f"at most {MAX_TAGS} tags in one frame")
            return tags
        tag = frame.get("tag")
        if not isinstance(tag, str):
            raise FrameError("invalid_argument", 'an ack needs "tag" (a string) or "tags"')
        return [tag]

    async def reject_frame(self, frame: dict[str, Any]) -> None:
        tag = frame.get("tag")
        requeue = frame.get("requeue", True)
        if not isinstance(tag, str):
            raise FrameError("invalid_argument", 'a reject needs "tag" (a string)')
        if not isinstance(requeue, bool):
            raise FrameError("invalid_argument", "requeue must be true or false")
        if tag not in self.reader.unsettled:
            raise FrameError(
                "unknown_tag", "the tag was not delivered on this connection or is settled",
                tags=[tag],
            )  # fmt: skip
        await self.reader.reject([tag], requeue=requeue)

    async def stop(self) -> None:
        if not self.authorized:
            return
        self.stopping = True
        store_watch.unwatch(self)
        self.window_open.set()
        await self.reader.stop(self.pump, self.connection_id)
        await traces_sent()  # a traced frame's "write" line goes out on this client
        await self.redis.aclose()


class MonitorConsumer(LiveSocket):
    """/ws/monitor/: the console's live feed (xumpweb/live/monitor.py makes the frames)."""

    kind = "monitor"
    frames = {"watch": "watch_frame"}

    def allows(self, principal: access.Principal) -> bool:
        return access.may(principal, "read-all")

    def forbidden_detail(self) -> str:
        return "the monitor needs the read right on every queue"

    async def start(self) -> None:
        self.feed = monitor.hub().join()
        self.tasks.append(asyncio.create_task(self._forward()))

    async def _forward(self) -> None:
        while not self.closed:
            text = await self.feed.get()
            await self.send_text(text)

    async def watch_frame(self, frame: dict[str, Any]) -> None:
        """Frames carry only these queues from now on (the dashboard's visible page)."""
        names = frame.get("queues")
        if (
            not isinstance(names, list)
            or len(names) > monitor.MAX_WATCH
            or not all(isinstance(name, str) for name in names)
        ):
            raise FrameError(
                "invalid_argument", f"queues must be a list of at most {monitor.MAX_WATCH} names"
            )
        view = _whole(frame, "view", 0, 2**31, None)
        self.feed.watch(names, view)
        monitor.hub().again(self.feed)

    async def stop(self) -> None:
        if self.authorized:
            monitor.hub().leave(self.feed)
