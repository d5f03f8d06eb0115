"""Operations on a queue's waiting messages: move, copy, delete or re-route those a filter,
seqs or mids choose (engine/message_ops.py, dry run first); purge; send dead letters on."""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja import Router
from pydantic import Field

from xumpweb import access
from xumpweb.api.auth import need
from xumpweb.api.common import call, record
from xumpweb.api.errors import ApiError
from xumpweb.api.schemas import ErrorOut, Seq, Strict

router = Router(tags=["messages"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut,
          503: ErrorOut}  # fmt: skip


class OperateIn(Strict):
    action: Literal["move", "copy", "delete", "reroute"]
    filter: str | None = Field(None, description="a filter expression (selector syntax)")
    seqs: list[Seq] | None = Field(None, min_length=1, max_length=10_000)
    mids: list[str] | None = Field(None, min_length=1, max_length=10_000)
    target: str | None = Field(None, description="move, copy; reroute (default: the queue)")
    address: str | None = Field(None, max_length=1000, description="reroute: a new address")
    dry_run: bool = Field(False, description="count and sample only; change nothing")
    expect: int | None = Field(
        None, ge=0, description="the dry run's count: 409 `changed` when another is chosen now"
    )


class DeadLetterSendIn(Strict):
    seqs: list[Seq] = Field(min_length=1, max_length=10_000)
    target: str | None = Field(None, description="default: the queue each came from")
    bounce: bool = Field(False, description="address each to its return address")


def operate(request: HttpRequest, queue: str, **arguments: Any) -> dict[str, Any]:
    """Check the rights, run `messages_operate` and audit what it did (not dry runs)."""
    need(request, queue, "operate")
    target = arguments.get("target")
    if arguments["action"] in ("move", "copy", "reroute") and target and target != queue:
        need(request, target, "publish")
    answer = call("messages_operate", queue=queue, **arguments)
    if not answer["dry_run"]:
        chosen = {k: arguments[k] for k in ("filter", "seqs", "mids", "target", "address")
                  if arguments.get(k) is not None}  # fmt: skip
        record(request, f"messages.{answer['action']}", queue, chosen,
               {"done": answer["done"], "target": answer["target"]})  # fmt: skip
    return answer


@router.post(
    "/queues/{path:queue}/messages/operate", response={200: dict, **ERRORS},
    summary="Move, copy, delete or re-route waiting messages",
)  # fmt: skip
def messages_operate(request: HttpRequest, queue: str, payload: OperateIn):
    """Choose waiting (unprocessed) messages by exactly one of `filter`, `seqs`, `mids`.
    `dry_run: true` answers how many match (`matched`) and a `sample` of 10, changing
    nothing; then send the same with `expect: <matched>` to act, all or nothing, in one
    router step. `move` and `copy` publish into `target` (mids kept), `reroute` takes
    the messages out and publishes them again into `target` (default: the queue itself)
    with an optional new `address`, `delete` drops them. Needs manage on the queue and
    publish on the target; audited."""
    return operate(request, queue, **payload.dict(exclude_none=True))


@router.post("/queues/{path:queue}/purge", response={200: dict, **ERRORS}, summary="Purge a queue")
def queue_purge(request: HttpRequest, queue: str):
    """Drop every waiting message (`{"purged": n}`); history stays. Needs manage; audited."""
    need(request, queue, "purge")
    answer = call("purge", queue=queue)
    record(request, "queue.purge", queue, None, answer)
    return answer


@router.post(
    "/queues/{path:queue}/dead-letters/send", response={200: dict, **ERRORS},
    summary="Send dead letters on",
)  # fmt: skip
def dead_letters_send(request: HttpRequest, queue: str, payload: DeadLetterSendIn):
    """Send the dead letters with these seqs (waiting in `queue`) back to the queue each
    came from (`x-original-queue`), or to `target`; `bounce` addresses each to its return
    address. The x-reason headers go, mids stay; all or nothing. Needs deadletter
    (manage) on this queue or on each letter's original queue, and publish where it
    goes; audited."""
    principal = access.for_request(request)
    waiting = {m["seq"]: m for m in call("peek", queue=queue, count=10_000)}
    for seq in payload.seqs:
        headers = (waiting.get(seq) or {}).get("headers") or {}
        source = str(headers.get("x-original-queue") or "")
        if not (access.may(principal, "deadletter", queue)
                or (source and access.may(principal, "deadletter", source))):  # fmt: skip
            raise ApiError(403, "forbidden", f"this caller may not handle the dead letters "
                           f"of {queue!r}")  # fmt: skip
        going = payload.target or source
        if going and not access.may(principal, "publish", going):
            raise ApiError(403, "forbidden", f"this caller may not publish on {going!r}")
    arguments: dict[str, Any] = {"queue": queue, "seqs": payload.seqs, "bounce": payload.bounce}
    if payload.target:
        arguments["target"] = payload.target
    answer = call("dead_letter_send", **arguments)
    record(request, "deadletter.send", queue, {"seqs": payload.seqs,
           "target": payload.target, "bounce": payload.bounce}, answer)  # fmt: skip
    return answer
