"""Operations on the unprocessed messages of any queue, as Artemis's console offers them:
move, copy, delete or re-route the messages chosen by a filter expression, by seqs or by
mids; with `dry_run`, only how many there are and a sample.

Theory of operation. Only unprocessed messages (waiting to be routed: held for credit, for
a selector, or dead letters) are chosen; history is never touched, deliveries outstanding
stay with their consumers, and messages scheduled out of routing (delayed, or waiting out
a redelivery delay: Engine.scheduled) are not chosen (Engine.cancel withdraws those).
A filter is compiled by the engine's own compiler (engine/filters.py), so it selects
exactly what a selector's filter with the same text would. Seqs and mids are all or
nothing: one that is not waiting raises NotFound and nothing changes.

What each action does, on the chosen messages in queue order:
  move     publish them into `target` (routed there as any arrival: a full target with an
           overflow selector or a dead-letter queue takes them that way), then take them out
           of the queue; mids stay, for tracing
  copy     publish them into `target`; they stay in the queue
  delete   take them out of the queue (counted as dropped, as a purge)
  reroute  take them out and publish them again into `target` (default: the queue itself,
           at its tail, behind what waits there), with a new `address` when one is given:
           the target's selectors route them afresh
The whole operation runs under the engine's lock in one call, so in the service it is one
router step: all of it is stored in one atomic step, or none. Publishing comes first where
it can fail (a full target raises QueueFull and nothing changed); taking out cannot fail.
A message taken out of a queue it was moved into settles upstream, as a purge does.
A `target` on another shard (a stand-in, engine/forwarding.py) is sent to as any publish
into it: the messages are forwarded there in the step's commit and routed by its router
(its limit applies there, after this step).

Taking a message out counts it as `dropped` on its queue (as purge and the dead-letter
inspector's send do): the engine keeps no separate counter for operator moves.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core import Engine
from engine.errors import Changed, InvalidArgument, NotFound
from engine.filters import compile_filter
from engine.message import Delivery, Message
from engine.validation import check_name

ACTIONS = ("move", "copy", "delete", "reroute")
MAX_LISTED = 10_000  # seqs or mids in one operation
SAMPLE = 10  # messages a dry run shows


@dataclass(frozen=True)
class Outcome:
    action: str
    queue: str
    target: str | None
    matched: int
    sample: list[Message]  # the first SAMPLE chosen messages (with their seqs)
    done: int  # messages acted on (0 on a dry run)
    dry_run: bool


def choose(
    engine: Engine,
    queue: str,
    *,
    filter: str | None = None,
    seqs: list[int] | None = None,
    mids: list[str] | None = None,
) -> list[Message]:
    """The unprocessed messages of `queue` chosen by exactly one of `filter`, `seqs` and
    `mids`, in queue order (each with its seq)."""
    given = [name for name, value in (("filter", filter), ("seqs", seqs), ("mids", mids))
             if value is not None]  # fmt: skip
    if len(given) != 1:
        raise InvalidArgument("choose the messages by exactly one of filter, seqs and mids"
                              + (f", not {' and '.join(given)}" if given else ""))  # fmt: skip
    depth = engine.queue_fetch(queue).depth
    waiting = engine.peek(queue, depth)
    if filter is not None:
        if not isinstance(filter, str) or not filter.strip():
            raise InvalidArgument("filter must be a non-empty expression")
        selects = compile_filter(filter)  # InvalidSelector, with the column, when bad
        return [message for message in waiting if selects(message)]
    listed: list = seqs if seqs is not None else mids  # type: ignore[assignment]
    name = given[0]
    if not isinstance(listed, list) or not listed:
        raise InvalidArgument(f"{name} must be a non-empty list")
    if len(listed) > MAX_LISTED:
        raise InvalidArgument(f"at most {MAX_LISTED} {name} in one operation")
    if seqs is not None:
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in seqs):
            raise InvalidArgument("seqs must be whole numbers from 1")
        wanted = set(seqs)
        found = [message for message in waiting if message.seq in wanted]
        missing = wanted - {message.seq for message in found}
    else:
        if not all(isinstance(m, str) and m for m in listed):
            raise InvalidArgument("mids must be non-empty strings")
        wanted = set(listed)
        found = [message for message in waiting if message.mid in wanted]
        missing = wanted - {message.mid for message in found}
    if missing:
        shown = ", ".join(str(item) for item in sorted(missing, key=str)[:5])
        raise NotFound(f"queue {queue!r} holds no unprocessed message with {name[:-1]} {shown}")
    return found


def operate(
    engine: Engine,
    queue: str,
    action: str,
    *,
    filter: str | None = None,
    seqs: list[int] | None = None,
    mids: list[str] | None = None,
    target: str | None = None,
    address: str | None = None,
    dry_run: bool = False,
    expect: int | None = None,
) -> tuple[Outcome, list[Delivery]]:
    """Apply `action` to the chosen messages (see the module doc); the outcome and the
    deliveries it caused. Checks everything before it changes anything. `expect` (the
    count a dry run showed, which the operator confirmed) refuses with Changed, doing
    nothing, when another number of messages is chosen now."""
    if action not in ACTIONS:
        raise InvalidArgument(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
    if not isinstance(dry_run, bool):
        raise InvalidArgument(f"dry_run must be true or false, not {dry_run!r}")
    if expect is not None and (
        not isinstance(expect, int) or isinstance(expect, bool) or expect < 0
    ):
        raise InvalidArgument(f"expect must be a whole number from 0, not {expect!r}")
    if action == "delete" and target is not None:
        raise InvalidArgument("delete takes no target")
    if action != "reroute" and address is not None:
        raise InvalidArgument("only reroute takes a new address")
    if action in ("move", "copy") and target is None:
        raise InvalidArgument(f"{action} needs a target queue")
    if action == "reroute" and target is None:
        target = queue
    if address is not None and (not isinstance(address, str) or len(address) > 1000):
        raise InvalidArgument("address must be a string of at most 1000 characters")
    with engine._lock:  # one step: nothing else routes between choosing and acting
        engine.queue_fetch(queue)  # NotFound first
        if target is not None:
            check_name("queue", target)
            engine.check_target(target)  # here, or another shard's queue (forwarded)
            if action == "move" and target == queue:
                raise InvalidArgument("a queue's messages cannot move into itself; use reroute")
        chosen = choose(engine, queue, filter=filter, seqs=seqs, mids=mids)
        outcome = Outcome(action, queue, target, len(chosen), chosen[:SAMPLE], 0, dry_run)
        if dry_run:
            return outcome, []
        if expect is not None and expect != len(chosen):
            raise Changed(f"{len(chosen)} messages match now, not the {expect} confirmed; "
                          "nothing was done")  # fmt: skip
        if not chosen:
            return outcome, []
        taken = [message.seq for message in chosen]
        # a copy keeps mid, headers, body and ttl; it gets the target's seq and a new
        # timestamp, as a dead letter sent on does (its delay, if any, is over)
        copies = [
            message._replace(
                address=message.address if address is None else address,
                seq=None, timestamp=None, destination=None, delay=None,
            )
            for message in chosen
        ]  # fmt: skip
        deliveries: list[Delivery] = []
        if action == "delete":
            deliveries.extend(engine.purge(queue, taken, reason="deleted"))  # type: ignore[arg-type]
        elif action == "copy":
            deliveries.extend(engine.publish_many(target, copies, keep_mids=True))  # type: ignore[arg-type]
        elif action == "reroute" and target == queue:
            # out first: they free their own room, so a queue at its limit takes them back
            deliveries.extend(engine.purge(queue, taken, reason="moved"))  # type: ignore[arg-type]
            deliveries.extend(engine.publish_many(queue, copies, keep_mids=True))
        else:  # move, or reroute elsewhere: a full target refuses before anything changed
            deliveries.extend(engine.publish_many(target, copies, keep_mids=True))  # type: ignore[arg-type]
            deliveries.extend(engine.purge(queue, taken, reason="moved"))  # type: ignore[arg-type]
    done = Outcome(action, queue, target, len(chosen), chosen[:SAMPLE], len(chosen), False)
    return done, deliveries
