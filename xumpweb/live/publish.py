"""/ws/publish/: publishing over a persistent connection (docs/websocket.md, "Publishing").

Theory of operation. A `publish` frame names a queue and carries one message or a batch;
the connection answers each with `published` (the mids, once the messages are durable in
the store's inbox: what a 202 means) or `error` (the HTTP API's codes). A frame is checked
as the HTTP API checks a request, with the same functions (api/publishing.py's
message_from and messages_from, engine/validation.py through them, access.may), then
handed to this process's group commit (live/group_commit.py: the publishes of every
connection that arrive while an append is on its way go in the next, one round trip and
one fsync for all) and the connection reads its next frame at once: a client may have
many publishes in flight. A publish to a queue that drops what does not fit is answered
once the router has published it (RouterAnswers, in the connection's order).

Rules this file keeps:
* answers go out in the order of the frames (a connection's FIFO of answer slots), so a
  client may match them by order or by `id`;
* a connection has at most MAX_IN_FLIGHT unanswered publish frames; past that it stops
  reading until answers go out (TCP's own back pressure reaches the client);
* a refused publish changes nothing; a refused append (inbox full, Redis away) refuses
  every publish in it, each with its own error frame.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

import orjson
from django.conf import settings

from engine.errors import InvalidArgument, XumpError
from engine.relay.trace import TRACE, stamped
from engine.validation import MAX_INT, MAX_NAME, MIN_INT, check_text
from xumpweb import access
from xumpweb.api.errors import ENGINE_ERRORS, RETRY_AFTER
from xumpweb.api.jsonbody import MAX_DEPTH, too_deep
from xumpweb.api.publishing import message_from, messages_from
from xumpweb.live.consumers import FrameError, LiveSocket
from xumpweb.live.frames import encode
from xumpweb.live.group_commit import Pending, RouterAnswers, group_commit

MAX_IN_FLIGHT = 10_000  # unanswered publish frames per connection before it stops reading
MAX_ID = 200  # characters of a frame id
FRAME_KEYS = frozenset({"type", "queue", "id", "message", "messages"})


class Forbidden(XumpError):
    """No publish right on the queue: the HTTP API's 403 forbidden."""


def error_code(error: XumpError) -> str:
    """The HTTP API's error code for an engine error (api/errors.py's table)."""
    if isinstance(error, Forbidden):
        return "forbidden"
    for kind in type(error).__mro__:
        if kind in ENGINE_ERRORS:
            return ENGINE_ERRORS[kind][1]
    return "invalid_request"  # pragma: no cover - every XumpError is in the table


def error_frame(frame_id: Any, error: XumpError) -> str:
    answer: dict[str, Any] = {"type": "error", "id": frame_id, "error": error_code(error),
                              "detail": str(error), "frame": "publish"}  # fmt: skip
    retry = RETRY_AFTER.get(type(error))
    if retry is not None:
        answer["retry_after"] = int(retry)
    return encode(answer)


class Slot:
    """One publish frame's place in its connection's answers: its text once known."""

    __slots__ = ("text",)

    def __init__(self, text: str | None = None) -> None:
        self.text = text


class FramePending(Pending):
    """A /ws/publish/ frame: its answer goes to its slot among the connection's answers."""

    __slots__ = ("connection", "frame_id", "slot")

    def __init__(self, connection: PublishConsumer, frame_id: Any, queue: str,
                 messages: list, slot: Slot) -> None:  # fmt: skip
        super().__init__(queue, messages)
        self.connection = connection
        self.frame_id = frame_id
        self.slot = slot

    def answer(self, text: str) -> None:
        self.finished = True
        self.slot.text = text
        self.connection.answered()

    def done(self) -> None:
        self.answer(encode({"type": "published", "id": self.frame_id, "mids": self.mids}))

    def fail(self, error: XumpError) -> None:
        self.answer(error_frame(self.frame_id, error))

    def await_router(self) -> None:
        self.connection.router_answers.wait(self)


class PublishConsumer(LiveSocket):
    """/ws/publish/: publish frames in, published/error answers out (see the module doc)."""

    kind = "publish"
    frames = {"publish": "publish_frame"}

    def parse(self, text: str) -> Any:
        """A publish frame is read as the HTTP API reads a body (api/jsonbody.py: refused
        past MAX_DEPTH levels, then json.loads), so what orjson reads otherwise or not at
        all (integers past 64 bits, which it makes floats; NaN; lone surrogates) reaches
        message_from's checks and is refused as HTTP refuses it, with the frame's id. Any
        other frame is read by orjson, as on every WebSocket."""
        if text.count("[") + text.count("{") > MAX_DEPTH and too_deep(text.encode()):
            raise ValueError(f"the frame is nested more than {MAX_DEPTH} levels deep")
        try:
            frame = json.loads(text)
        except (ValueError, RecursionError):
            frame = None
        if type(frame) is dict and frame.get("type") == "publish":
            return frame
        return orjson.loads(text)

    def allows(self, principal: access.Principal) -> bool:
        self.principal = principal
        self.rights: dict[str, bool] = {}  # queue -> may publish, until the rights change
        return any("publish" in granted for granted in principal.rights.values())

    def forbidden_detail(self) -> str:
        return "no publish right on any queue"

    async def start(self) -> None:
        self.max_body = settings.XUMP_MAX_BODY  # read once: a settings lookup costs 1 us
        self.answers: deque[Slot] = deque()
        self.ready = asyncio.Event()  # an answer at the head of `answers` may go out
        self.room = asyncio.Event()  # fewer than MAX_IN_FLIGHT answers are waiting
        self.room.set()
        self.router_answers = RouterAnswers()
        self.tasks.append(asyncio.create_task(self._send_answers()))
        await self.send_text(encode({"type": "ready"}))

    async def stop(self) -> None:
        if self.authorized:
            self.router_answers.close()

    # -- frames in -----------------------------------------------------------------------------
    async def publish_frame(self, frame: dict[str, Any]) -> None:
        frame_id = frame.get("id")
        if frame_id is not None and not (
            (type(frame_id) is str and len(frame_id) <= MAX_ID and frame_id.isascii())
            or (type(frame_id) is int and MIN_INT <= frame_id <= MAX_INT)
        ):
            raise FrameError("invalid_argument", f"id must be ASCII text of at most {MAX_ID} "
                             "characters or a 64-bit integer", id=None)  # fmt: skip
        if len(self.answers) >= MAX_IN_FLIGHT:
            self.room.clear()
            await self.room.wait()
            if self.closed:
                return  # the connection went while the frame waited: nobody hears an answer
        slot = Slot()
        self.answers.append(slot)
        try:
            queue, messages = self._read(frame)
        except XumpError as error:
            slot.text = error_frame(frame_id, error)
            self.answered()
            return
        if any(TRACE in message.headers for message in messages):  # bench-only (trace.py)
            messages = [message._replace(headers=stamped(message.headers, "recv"))
                        if TRACE in message.headers else message
                        for message in messages]  # fmt: skip
        group_commit().submit(FramePending(self, frame_id, queue, messages, slot))

    def _read(self, frame: dict[str, Any]) -> tuple[str, list]:
        if not FRAME_KEYS.issuperset(frame):
            unknown = ", ".join(sorted(repr(k)[:40] for k in set(frame) - FRAME_KEYS))
            raise InvalidArgument(f"unknown field(s): {unknown}")
        queue = frame.get("queue")
        if type(queue) is not str or not 0 < len(queue) <= MAX_NAME:
            raise InvalidArgument(f"queue must be a queue name (1 to {MAX_NAME} characters)")
        check_text("queue", queue)
        allowed = self.rights.get(queue)
        if allowed is None:
            allowed = self.rights[queue] = access.may(self.principal, "publish", queue)
        if not allowed:
            raise Forbidden(f"this caller may not publish on queue {queue!r}")
        if ("message" in frame) == ("messages" in frame):
            raise InvalidArgument('give "message" (one) or "messages" (a batch), not both')
        if "message" in frame:
            return queue, [message_from(frame["message"], self.max_body)]
        return queue, messages_from({"messages": frame["messages"]})

    # -- answers out ---------------------------------------------------------------------------
    def answered(self) -> None:
        self.ready.set()

    async def _send_answers(self) -> None:
        answers = self.answers
        try:
            while not self.closed:
                await self.ready.wait()
                self.ready.clear()
                while answers and answers[0].text is not None:
                    if not await self.send_text(answers.popleft().text):  # type: ignore[arg-type]
                        return
                if len(answers) < MAX_IN_FLIGHT:
                    self.room.set()
        finally:
            self.room.set()  # a frame waiting for room must not wait for ever: it goes on

    async def fail(self, code: str, detail: str, close_code: int) -> None:
        """Closing (a revoked token, a right taken away): the answers already known go out
        first, the frames still on their way get none (as for a connection cut off)."""
        answers = getattr(self, "answers", None)
        while answers and answers[0].text is not None:
            if not await self.send_text(answers.popleft().text):  # type: ignore[arg-type]
                break
        if answers:
            answers.clear()
        await super().fail(code, detail, close_code)

    async def error(self, code: str, detail: str, **extra: Any) -> None:
        """Error frames keep their place among the answers (see the module doc)."""
        if not self.authorized or not self.answers:
            await super().error(code, detail, **extra)
            return
        self.answers.append(Slot(encode({"type": "error", "error": code, "detail": detail,
                                         **extra})))  # fmt: skip
        self.answered()
