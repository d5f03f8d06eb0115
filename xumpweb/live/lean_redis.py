"""The live path's Redis client: commands pipelined on one connection, read by hiredis.

Why not redis-py's asyncio client here. Measured on this machine (2026-11-26), one PUBLISH
round trip cost 105 µs of CPU through `redis.asyncio.Redis` and a pipeline of two 207 µs,
against 23 µs for the same command written on an asyncio transport and read by hiredis's
Reader: the difference is Python (its retry wrapper, connection pool, timeout contexts,
argument packing and response callbacks), paid on every round trip. At one message a
round trip (a lone SEND, a paced publisher) that was most of the STOMP server's 700 µs of
CPU a message, and on two cores every hop of the path waits for that CPU. So the few
commands a message costs on its way (the group commit's append, the subscriber's take and
claim, its acks, the bench's trace lines) go through this client; everything else keeps
redis-py.

Theory of operation. A `LeanRedis` holds at most one connection, made when first needed
(AUTH and SELECT from the URL, redis-py's URL forms: redis://, rediss://, unix://).
`execute(*commands)` writes the commands at once and waits for their replies; calls made
while others wait are pipelined behind them on the same connection, and Redis answers in
order, so each call takes the next replies in turn (`_Protocol.waiting`). Replies are
redis-py's (bytes, ints, lists, None); a command Redis refuses is redis-py's exception for
the refusal (a ResponseError: OutOfMemoryError for OOM, NoScriptError...), raised
once every reply of its call was read (as redis-py's pipeline raises), so the connection
stays in step. `send` gives one future per command, for a caller that must see the first
reply before the last (a blocking claim says its client id before it blocks). Lua scripts
go by their SHA1 (`evalsha`): the client loads the ones it is given (`scripts`) on every
connection it makes, so a pipeline need not carry a script's text; should the server's
scripts be flushed meanwhile, the call that meets NOSCRIPT fails (as a refused command)
and drops the connection, and the next connects and loads them again.

Failures are redis-py's exceptions, so callers keep their handling: a connection that
closes or cannot be made fails every call waiting on it with ConnectionError (the next
call connects again); a call not answered within `timeout` seconds (None: no limit, for
a blocking command) closes the connection and fails every call waiting on it with
TimeoutError, since the replies of a pipelined connection cannot be skipped. Whether a
failed write took effect is unknown, as with any client: a caller treats it as a lost
answer (the group commit fails its publishes; the outbox reader sends its acks again).

Tracking (`tracking=`): a connection that says HELLO 3 and CLIENT TRACKING ON NOLOOP
when it is made, so Redis remembers the keys it reads and pushes it one `invalidate`
message when another connection next changes one of them (RESP3 push messages: a key read
again is remembered again). Each push, and the end of the connection (what it tracked is
unknown then: Redis forgets a connection's keys with it), calls `tracking()`. A filtering
consumer waits on it for changes of its outbox (xumpweb/live/outbox.py). Only such
connections read pushes: a plain one runs the same code as before it existed.

Not here: Redis Cluster redirections (the live processes talk to the node that serves
their shard, xumpweb/redis_clients.py), RESP3 replies on plain connections, pub/sub
subscriptions.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any

import hiredis
from redis._parsers.base import BaseParser
from redis.connection import parse_url
from redis.exceptions import ConnectionError, InvalidResponse, NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeout

CONNECT_TIMEOUT = 5.0  # seconds to connect, AUTH and SELECT
_shas: dict[str, str] = {}  # a script's text -> its SHA1
parse_error = BaseParser.parse_error  # an error reply's text -> redis-py's exception for it


def evalsha(body: str, keys: list, args: list) -> tuple:
    """The EVALSHA command of Lua script `body`: for a call of a client that loads it
    (`scripts`), whose connection then has it unless the server's scripts were flushed
    since (the call fails with NOSCRIPT, and the next connects again and reloads them)."""
    sha = _shas.get(body)
    if sha is None:
        sha = _shas[body] = hashlib.sha1(body.encode()).hexdigest()
    return ("EVALSHA", sha, len(keys), *keys, *args)


def answer(reply: Any) -> Any:
    """A reply of `send`'s futures, raised when it is Redis's refusal."""
    if isinstance(reply, RedisError):
        raise reply
    return reply


class _Protocol(asyncio.Protocol):
    """One connection: writes packed commands, hands replies to the calls in order."""

    PUSH: type | None = None  # the replies that are Redis's pushes, not answers (_Tracking)

    def __init__(self) -> None:
        # a refusal is read as redis-py's exception for it (OutOfMemoryError for OOM, ...)
        self.reader = hiredis.Reader(protocolError=InvalidResponse, replyError=parse_error)
        # per call in flight, oldest first: [replies so far, how many it waits for (0: one,
        # handed over as itself), future]
        self.waiting: deque[list] = deque()
        self.transport: asyncio.Transport | None = None
        self.failure: Exception | None = None  # set once the connection is lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        reader, waiting, push = self.reader, self.waiting, self.PUSH
        reader.feed(data)
        while True:
            try:
                reply = reader.gets()
            except InvalidResponse as problem:
                self._lose(ConnectionError(f"Redis sent what is not RESP: {problem}"))
                return
            if reply is False:
                return
            if type(reply) is push:  # a key a tracking connection read was changed
                self.changed()
                continue
            if not waiting:
                self._lose(ConnectionError("Redis sent a reply nobody asked for"))
                return
            call = waiting[0]
            if call[1] == 0:  # a future of its own (`send`'s each): the reply itself
                waiting.popleft()
                if not call[2].done():
                    call[2].set_result(reply)
                continue
            call[0].append(reply)
            if len(call[0]) == call[1]:
                waiting.popleft()
                if not call[2].done():
                    call[2].set_result(call[0])

    def connection_lost(self, exc: Exception | None) -> None:
        if self.failure is None:
            detail = f": {exc}" if exc else ""
            self.failure = ConnectionError(f"the connection to Redis closed{detail}")
        failure = self.failure
        while self.waiting:
            future = self.waiting.popleft()[2]
            if not future.done():
                future.set_exception(failure)

    def _lose(self, failure: Exception) -> None:
        """Fail every call in flight with `failure` and close (replies are out of step)."""
        if self.failure is None:
            self.failure = failure
        if self.transport is not None:
            self.transport.abort()  # connection_lost follows, in a later turn
        self.connection_lost(None)

    def expire(self, future: asyncio.Future) -> None:
        """`future`'s call was not answered in time: the connection goes (see the doc)."""
        if not future.done():
            self._lose(RedisTimeout("Redis did not answer in time"))

    def write(self, commands: tuple, each: bool, loop: asyncio.AbstractEventLoop) -> list:
        if self.failure is not None:
            raise self.failure
        pack = hiredis.pack_command
        data = b"".join(pack(command) for command in commands)
        if each:
            futures = [loop.create_future() for _ in commands]
            self.waiting.extend([None, 0, future] for future in futures)
        else:
            futures = [loop.create_future()]
            self.waiting.append([[], len(commands), futures[0]])
        self.transport.write(data)  # type: ignore[union-attr]
        return futures


class _Tracking(_Protocol):
    """A connection with CLIENT TRACKING on (see the module doc): Redis's pushes call
    `changed` instead of answering a call (_Protocol.data_received tells them by their type,
    PUSH), and so does the connection's end."""

    PUSH = hiredis.PushNotification

    def __init__(self, changed: Callable[[], None]) -> None:
        super().__init__()
        self.changed = changed

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.changed()  # what it tracked is gone with it: its reader must look again


class LeanRedis:
    """A pipelined connection to the Redis server of `url` (see the module doc)."""

    def __init__(
        self,
        url: str,
        timeout: float | None = 5.0,
        scripts: tuple = (),
        tracking: Callable[[], None] | None = None,
    ) -> None:
        self.options = parse_url(url)
        self.timeout = timeout
        self.scripts = scripts  # Lua scripts loaded on every connection it makes
        self.tracking = tracking  # called when a key it read changes (see the module doc)
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task | None = None

    async def execute(self, *commands: tuple, timeout: float | None = -1.0) -> list:
        """The replies of `commands`, sent at once; raises the first refusal (a RedisError)
        among them after all were read. `timeout`: this call's, instead of the client's."""
        (future,) = await self.send(*commands, each=False, timeout=timeout)
        replies = await future
        for reply in replies:
            if isinstance(reply, NoScriptError):  # flushed: reload on a new connection
                self.abort()
            answer(reply)
        return replies  # type: ignore[no-any-return]

    async def script(self, body: str, keys: list, args: list) -> Any:
        """Run a Lua script by its SHA1 (EVALSHA), sending its text (EVAL) only when the
        server does not have it (NOSCRIPT: SCRIPT FLUSH, or not one of `scripts`)."""
        try:
            (reply,) = await self.execute(evalsha(body, keys, args))
        except NoScriptError:
            (reply,) = await self.execute(("EVAL", body, len(keys), *keys, *args))
        return reply

    async def send(
        self, *commands: tuple, each: bool = True, timeout: float | None = -1.0
    ) -> list[asyncio.Future]:
        """Write `commands`; futures of their replies: one a command (`each`), or one for
        the list of them all. A reply Redis refused is its exception, not raised (`answer`
        raises it)."""
        protocol = self._protocol
        if protocol is None or protocol.failure is not None:
            protocol = await self._connect()
        loop = asyncio.get_running_loop()
        futures = protocol.write(commands, each, loop)
        limit = self.timeout if timeout == -1.0 else timeout
        if limit is not None:
            last = futures[-1]
            timer = loop.call_later(limit, protocol.expire, last)
            last.add_done_callback(lambda _: timer.cancel())
        return futures

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
        connecting = self._connecting
        try:
            return await asyncio.shield(connecting)
        finally:
            if connecting.done() and self._connecting is connecting:
                self._connecting = None

    async def _open(self) -> _Protocol:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                protocol = await self._dial()
                first = []
                options = self.options
                if options.get("password"):
                    user = options.get("username")
                    first.append(("AUTH", user, options["password"]) if user
                                 else ("AUTH", options["password"]))  # fmt: skip
                if options.get("db"):
                    first.append(("SELECT", options["db"]))
                if self.tracking is not None:
                    first.append(("HELLO", "3"))
                    first.append(("CLIENT", "TRACKING", "ON", "NOLOOP"))
                first.extend(("SCRIPT", "LOAD", body) for body in self.scripts)
                if first:
                    (future,) = protocol.write(tuple(first), False, asyncio.get_running_loop())
                    for reply in await future:
                        if isinstance(reply, RedisError):
                            protocol.transport.close()  # type: ignore[union-attr]
                            raise ConnectionError(f"Redis refused the connection: {reply}")
        except TimeoutError:  # asyncio's (the builtin), from asyncio.timeout
            raise RedisTimeout("Redis did not answer the connection in time") from None
        except OSError as problem:
            raise ConnectionError(f"cannot connect to Redis: {problem}") from None
        old, self._protocol = self._protocol, protocol
        if old is not None and old.transport is not None:
            old.transport.close()
        return protocol

    def _protocol_of(self) -> _Protocol:
        """A new connection's protocol: a tracking one when `tracking` is given."""
        if self.tracking is not None:
            return _Tracking(self.tracking)
        return _Protocol()

    async def _dial(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        options = self.options
        if options.get("path"):
            _, protocol = await loop.create_unix_connection(self._protocol_of, options["path"])
            return protocol
        context = None
        if (
            options.get("connection_class") is not None
            and "SSL" in options["connection_class"].__name__
        ):
            context = ssl.create_default_context(cafile=options.get("ssl_ca_certs"))
            if options.get("ssl_cert_reqs") in ("none", ssl.CERT_NONE):
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        _, protocol = await loop.create_connection(
            self._protocol_of,
            options.get("host", "localhost"),
            options.get("port", 6379),
            ssl=context,
        )
        return protocol

    async def aclose(self) -> None:
        """Close the connection: calls in flight fail with ConnectionError."""
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()

    def abort(self) -> None:
        """Drop the connection now (a blocking command on it ends for this client)."""
        protocol, self._protocol = self._protocol, None
        if protocol is not None:
            protocol._lose(ConnectionError("the connection was closed by its client"))
