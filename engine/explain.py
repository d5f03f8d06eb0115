"""Explain: route a message on paper (SPEC §12). The Engine inherits `explain`.

Theory of operation: `explain(queue, message)` walks the network as the routing rules
(rules.py) would for a message arriving now, and records instead of acting. At each queue
it meets, every selector gets a verdict: it copies, it takes, or why not (disabled, which
MATCH condition failed and on what value, the filter FALSE or UNKNOWN, no credit, held,
another taker's turn, a target queue that does not exist, the default or overflow rule);
then the queue's outcome (taken, copied only, waits for credit or for a target queue, held,
dead-lettered, dropped, refused) and the walk follows each copy, move, bounce and dead
letter to where the message would end, in the order the routing takes them: each copy as
far as it goes before the next and before the take (rules.py routes an arrival at once),
so a queue that one reaches is visited for the rest (rule 2), as it is for the routing.
Targets named by the message are found by the routing's own `_named_target`.

Shards (forwarding.py, docs/scaling.md): a copy, move, bounce or dead letter into another
shard's queue (a stand-in) is a forward there, and a DELIVER to a destination read on
another shard a MOVE into its delivery queue there (no such queue known here: dead-lettered
`no-target`, as rules.py does). Such a queue is a step of its own, with its `shard` and the
outcome `forwarded`, where the walk ends: a stand-in is a name and a shard, and this engine
holds none of that shard's selectors, limits or dead-letter queues to follow, so explain
says no more than it knows. A MOVE's step says the credit it holds until settled back.

Nothing changes: no counter, depth, credit, turn, history, journal event or mid is touched
(the message is checked as a publish checks it but keeps the mid it was given, or none).
Conditions are compiled per call (explain is not a hot path); the verdicts use the same
indexes and field readers as the routing table, so the paper agrees with the routing.

The words of a WHEN's verdict (`why_not_met`: which condition failed on what value, the
filter FALSE or UNKNOWN; `default_passes`, OVERFLOW_ONLY) are module-level so that the
console's selector preview, which judges a selector not yet saved, says the same.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from engine.errors import InvalidArgument
from engine.fields import field_reader
from engine.message import Message
from engine.routing_table import SelectorRuntime, condition_matcher
from engine.rules import QueueRuntime, _bounced, _choose_taker, dead_lettered, no_delivery_queue
from engine.selectors import all_matches, describe
from engine.validation import check_name

MAX_STEPS = 200  # queues one explanation visits at most (a network is finite; so is paper)
SHOWN = 200  # characters of a message's value that a verdict quotes

OVERFLOW_ONLY = "overflow: acts only on a message arriving at a full queue"

# where a message goes next: (queue, the message as it arrives there, how, from where). The
# methods that send a message on return its hop, and `arrive` or `act` follows it: two
# frames of the stack per queue, so MAX_STEPS queues stay well inside Python's recursion
# limit, under the router's frames too
Hop = tuple[QueueRuntime, Message, str, dict[str, Any]]


class Explaining:
    """`explain`, as a method the Engine inherits."""

    _lock: Any
    _queues: dict[str, QueueRuntime]
    _queue: Callable[[object], QueueRuntime]
    _checked: Callable[..., Message]
    _time: Callable[[], float]
    _target_named: Callable[[str], QueueRuntime | None]
    _named_target: Callable[..., tuple[Any, tuple[str, str | None, dict | None]]]
    _elsewhere: Callable[[str], str | None]  # forwarding.py: a destination read elsewhere
    _remote: dict[str, Any]  # forwarding.py: stand-ins of other shards' queues
    dead_letter: str | None

    def explain(self, queue: str, message: Message) -> dict[str, Any]:
        """Where `message` would go if it were published to `queue` now, and why, as JSON-able
        data: {"queue", "steps": [one per queue met, in the order met], "ends": [...]}.
        Changes nothing. InvalidName for a queue name that is no name (not a string, say),
        NotFound for an unknown queue; InvalidArgument for a message that `publish` would
        refuse."""
        check_name("queue", queue, allow_reserved=True)  # before it is used as a key
        if not isinstance(message, Message):
            raise InvalidArgument(f"explain takes a Message, not {type(message).__name__}")
        mid = message.mid if isinstance(message.mid, str) and message.mid else "(explain)"
        message = self._checked(message._replace(mid=mid), True)  # keeps it: no serial used
        with self._lock:
            first = self._queue(queue)
            walk = _Walk(self)
            explained: dict[str, Any] = {"queue": first.name, "mid": message.mid}
            if message.delay:  # held first (SPEC §8): routed when it falls due, its ttl
                due = message.timestamp + message.delay  # counted from then
                explained["scheduled"] = {
                    "delay": message.delay,
                    "due": due,
                    "said": f"held {message.delay:g} s before it is routed; the steps are the "
                    "network's as it is now, at that time",
                }
            walk.arrive(first, message, "publish", None)
            return {**explained, "steps": walk.steps, "ends": walk.ends}


class _Walk:
    """One explanation: the queues met so far and the ends reached."""

    def __init__(self, engine: Explaining) -> None:
        self.engine = engine
        self.steps: list[dict[str, Any]] = []
        self.ends: list[dict[str, Any]] = []
        self.visited: set[str] = set()
        self.now = engine._time()

    def end(self, queue: str, outcome: str, **more: Any) -> None:
        self.ends.append({"queue": queue, "outcome": outcome, **more})

    def arrive(
        self,
        qrt: QueueRuntime,
        message: Message,
        how: str,
        source: dict[str, Any] | None,
        destination: str | None = None,
    ) -> None:
        step: dict[str, Any] = {"queue": qrt.name, "arrives_by": how, "from": source}
        if len(self.steps) >= MAX_STEPS:
            step["outcome"] = {"kind": "not followed", "reason": f"over {MAX_STEPS} queues"}
            self.steps.append(step)
            self.end(qrt.name, "not followed", reason=f"over {MAX_STEPS} queues")  # not nowhere
            return
        self.steps.append(step)
        self.visited.add(qrt.name)
        if qrt.remote is not None:  # another shard's queue: forwarded, routed there
            self.forwarded(step, qrt.name, qrt.remote, destination)
            return
        state = qrt.state
        step["ahead"] = state.depth()  # messages it would wait behind (FIFO)
        expires = qrt.expires_at(message)
        if expires is not None and expires <= self.now:
            step["selectors"] = []
            self.follow(self.dead_letter(step, qrt, message, "expired"))
            return
        full = qrt.limit is not None and state.depth() >= qrt.limit
        step["full"] = full
        verdicts = [self.verdict(qrt, sel, message, full) for sel in _in_order(qrt)]
        step["selectors"] = verdicts
        if step["ahead"] and not full and qrt.spec.priorities == 1:
            # messages wait there (for credit, a target queue, a selector): rules.py appends
            # an arrival behind them, routed after them, in order (rule 4); the verdicts say
            # what would become of it at the head (with priorities, one may go ahead)
            step["outcome"] = {
                "kind": "waits",
                "reason": f"{step['ahead']} message(s) wait ahead of it (rule 4): it is routed "
                "after them, in order; the verdicts are for when it is at the head",
            }
            self.end(qrt.name, "waits behind others")
            return
        matched = [v for v in verdicts if v["meets"]]
        plain = [v for v in matched if v["when"] not in ("default", "overflow")]
        if full:
            chosen = [v for v in matched if v["when"] == "overflow"]
            if not chosen:
                self.follow(self.overflowed(step, qrt, message))
                return
        elif plain:
            chosen = plain
            for v in matched:
                if v["when"] == "default":
                    v["meets"] = False
                    v["reason"] = default_passes([p["selector"] for p in plain])
        else:
            chosen = [v for v in matched if v["when"] == "default"]
            if not chosen:
                if not qrt.routing_table.routing:
                    step["outcome"] = {
                        "kind": "held",
                        "reason": "the queue has no enabled selectors (rule 6): it waits",
                    }
                    self.end(qrt.name, "held")
                    return
                self.follow(self.dead_letter(step, qrt, message, "unroutable"))
                return
        self.act(step, qrt, message, chosen)

    def follow(self, hop: Hop | None) -> None:
        if hop is not None:
            self.arrive(*hop)

    def forwarded(
        self, step: dict[str, Any], queue: str, shard: str, destination: str | None
    ) -> None:
        """The message arrives at another shard's queue (a stand-in): the routing records a
        forward, carried to that shard and routed by its router. This engine holds no
        selectors, limit or dead-letter queue of that queue (a stand-in is a name and a
        shard), so the walk ends here; `destination`: the queue is that destination's
        delivery queue (a DELIVER to a destination read on that shard)."""
        step["shard"] = shard
        what = f"queue {queue!r}" if destination is None else (
            f"the delivery queue {queue!r} of destination {destination!r}")  # fmt: skip
        step["outcome"] = {
            "kind": "forwarded",
            "shard": shard,
            "reason": f"{what} lives on shard {shard!r}: the message is forwarded there and "
            f"routed by that shard's router; this engine does not hold the selectors of "
            f"shard {shard!r}, so the walk ends here",
        }
        more = {} if destination is None else {"destination": destination}
        self.end(queue, "forwarded", shard=shard, by=step["arrives_by"], **more,
                 reason=f"routed on shard {shard!r}, whose selectors this engine does not "
                 "hold")  # fmt: skip

    def overflowed(self, step: dict[str, Any], qrt: QueueRuntime, message: Message) -> Hop | None:
        """A full queue that no overflow selector takes it from: dead-lettered or dropped,
        but refused (QueueFull) when published to it directly and it has no dead-letter
        queue (rules.py _overflow)."""
        if step["arrives_by"] == "publish" and qrt.dead_letter is None:
            step["outcome"] = {
                "kind": "refused",
                "reason": "the queue is full and has no overflow selector that takes it or "
                "dead-letter queue: publish raises QueueFull",
            }
            self.end(qrt.name, "refused", reason="queue full")
            return None
        return self.dead_letter(step, qrt, message, "overflow")

    def verdict(
        self, qrt: QueueRuntime, sel: SelectorRuntime, message: Message, full: bool
    ) -> dict[str, Any]:
        spec = sel.spec
        v: dict[str, Any] = {
            "selector": sel.id,
            "describe": describe(spec),
            "when": spec.when,
            "action": spec.action,
            "meets": False,
            "reason": None,
        }
        if spec.target_from is not None:
            v["target_from"] = spec.target_from  # the message names the target (visible_to)
        if not spec.enabled:
            v["reason"] = "disabled"
            return v
        if spec.when == "overflow" and not full:
            v["reason"] = OVERFLOW_ONLY
            return v
        if spec.when != "overflow" and full:
            v["reason"] = "the queue is full: only its overflow selector acts"
            return v
        if spec.when == "match":  # a filter alone is a match without conditions
            failed = why_not_met(all_matches(spec), sel.matches)(message)
            if failed is not None:
                v.update(failed)
                return v
        v["meets"] = True
        return v

    def act(
        self, step: dict[str, Any], qrt: QueueRuntime, message: Message, chosen: list[dict]
    ) -> None:
        selectors = qrt.selectors
        copies = [selectors[v["selector"]] for v in chosen if v["action"] == "copy"]
        takers = [selectors[v["selector"]] for v in chosen if v["action"] != "copy"]
        by_id = {v["selector"]: v for v in chosen}
        taker = _choose_taker(takers) if takers else None
        for sel in takers:
            v = by_id[sel.id]
            if sel is taker:
                v["verdict"] = "takes"
            else:
                v["verdict"] = "passes"
                v["reason"] = _why_not_taken(sel, taker)
        if takers and taker is None and step.get("full"):
            hop = self.overflowed(step, qrt, message)  # rule 7: no overflow taker can take it
            if hop is not None:
                self.arrive(*hop)
            return
        if takers and taker is None:
            if all(_target_missing(sel) for sel in takers):
                reason = (
                    "takers matched but their target queues do not exist (rule 4): it waits "
                    "in order until one does"
                )
                self.end(qrt.name, "waits for its target queue")
            else:
                reason = "takers matched but none can take it now (rule 4): it waits in order"
                self.end(qrt.name, "waits for credit")
            step["outcome"] = {"kind": "waits", "reason": reason}
            return
        # COPYs first, in selector order, each followed as far as it goes before the next
        # (rules.py _route_entry): a queue one of them reaches is one a later copy, the
        # taker's move or a dead letter finds visited, as the routing finds it
        for sel in copies:
            v = by_id[sel.id]
            v["verdict"] = "copies"
            target, failure, letter = self.target_of(qrt, sel, message)
            hop = None
            if failure is not None:
                v["target_failure"] = failure
                hop = self.dead_letter_copy(qrt, message, letter)  # type: ignore[arg-type]
            elif target is None:  # its fixed target queue was deleted: rules.py _copy skips it
                v["reason"] = (
                    f"its target queue {sel.target!r} does not exist: the copy goes nowhere"
                )
            elif target.name in self.visited:
                v["reason"] = f"already arrived in {target.name!r} in this step: not copied twice"
            else:
                v["target"] = target.name
                hop = (target, message, "copy", {"queue": qrt.name, "selector": sel.id})
            if hop is not None:
                self.arrive(*hop)
        if taker is None:
            step["outcome"] = {"kind": "processed", "reason": "only copies took it (rule 5)"}
            self.end(qrt.name, "history" if qrt.history else "processed")
            return
        hop = self.take(step, qrt, taker, by_id[taker.id], message)
        if hop is not None:
            self.arrive(*hop)

    def take(
        self,
        step: dict[str, Any],
        qrt: QueueRuntime,
        sel: SelectorRuntime,
        v: dict[str, Any],
        message: Message,
    ) -> Hop | None:
        """What the taker does; where the message goes next, if anywhere."""
        action = sel.action
        if action == "delete":
            step["outcome"] = {"kind": "deleted", "selector": sel.id}
            self.end(qrt.name, "deleted", selector=sel.id)
            return None
        target, failure, letter = self.target_of(qrt, sel, message)
        if failure is not None:
            v["target_failure"] = failure
            step["outcome"] = {"kind": "taken", "selector": sel.id, "action": action}
            reason, detail, extra = letter  # type: ignore[misc]
            return self.dead_letter(step, qrt, message, reason, failure, detail, extra)
        if action == "deliver":
            v["target"] = target
            home = self.engine._elsewhere(target)
            if home is None:  # read on this shard (or the engine has no shards)
                step["outcome"] = {"kind": "delivered", "selector": sel.id, "destination": target}
                self.end(qrt.name, "delivered", destination=target, selector=sel.id)
                return None
            return self.deliver_elsewhere(step, qrt, sel, v, message, target, home)
        v["target"] = target.name
        if target.name in self.visited:  # a copy, a move or a dead letter got there first
            step["outcome"] = {"kind": "taken", "selector": sel.id, "action": action}
            loop = {"reason": "a loop of moves"}
            return self.dead_letter(step, qrt, message, "unroutable", loop)
        step["outcome"] = {"kind": "taken", "selector": sel.id, "action": action,
                           "to": target.name}  # fmt: skip
        if target.remote is not None:
            step["outcome"]["shard"] = target.remote
            step["outcome"]["reason"] = _held_until_settled(sel, target.name, target.remote)
        moved = _bounced(message) if action == "bounce" else message
        return target, moved, action, {"queue": qrt.name, "selector": sel.id}

    def deliver_elsewhere(
        self,
        step: dict[str, Any],
        qrt: QueueRuntime,
        sel: SelectorRuntime,
        v: dict[str, Any],
        message: Message,
        destination: str,
        home: str,
    ) -> Hop | None:
        """A DELIVER to a destination read on shard `home` (rules.py _take): a MOVE into
        its delivery queue there, the queue of its name, if this engine knows one (a
        stand-in); else dead-lettered `no-target`. The walk ends at that queue."""
        far = self.engine._remote.get(destination)
        if far is None:
            detail = no_delivery_queue(destination, home)
            failure = {"reason": "no-target", "detail": detail, "target": destination}
            v["target_failure"] = failure
            step["outcome"] = {"kind": "taken", "selector": sel.id, "action": "deliver"}
            extra = {"x-target": destination}
            return self.dead_letter(step, qrt, message, "no-target", failure, detail, extra)
        if far.name in self.visited:  # a copy or a dead letter got there first: a loop
            step["outcome"] = {"kind": "taken", "selector": sel.id, "action": "deliver"}
            loop = {"reason": "a loop of moves"}
            return self.dead_letter(step, qrt, message, "unroutable", loop)
        step["outcome"] = {
            "kind": "taken",
            "selector": sel.id,
            "action": "deliver",
            "destination": destination,
            "to": far.name,
            "shard": home,
            "reason": f"destination {destination!r} is read on shard {home!r}: a MOVE into "
            f"its delivery queue {far.name!r} there, counted delivered here; "
            + _held_until_settled(sel, far.name, home, acked=True),
        }
        self.arrive(far, message, "move", {"queue": qrt.name, "selector": sel.id}, destination)
        return None

    def target_of(
        self, qrt: QueueRuntime, sel: SelectorRuntime, message: Message
    ) -> tuple[Any, dict[str, Any] | None, tuple[str, str | None, dict | None] | None]:
        """(target, failure, letter): the selector's target for this message as rules.py
        finds it (the queue's runtime, or a DELIVER's destination name) with no failure;
        None and no failure for a fixed target queue that does not exist (deleted since);
        or None, the failure as the verdict shows it and the dead letter's (reason, detail,
        extra headers) when `target_from` names no target."""
        if sel.target_from is None:
            return (sel.target if sel.action == "deliver" else sel.target_queue), None, None
        found, letter = self.engine._named_target(qrt, sel, message)
        if found is not None:
            return found, None, None
        reason, detail, extra = letter
        failure: dict[str, Any] = {"reason": reason}
        if detail is not None:
            failure["detail"] = detail
        if extra and "x-target" in extra:
            failure["target"] = str(extra["x-target"])[:200]
        return None, failure, letter

    def dead_letter(
        self,
        step: dict[str, Any],
        qrt: QueueRuntime,
        message: Message,
        reason: str,
        failure: dict[str, Any] | None = None,
        detail: str | None = None,
        extra: dict[str, str | int] | None = None,
    ) -> Hop | None:
        """The message leaves `qrt` for its dead-letter queue (the hop), or is dropped."""
        target = self.engine._target_named(qrt.dead_letter) if qrt.dead_letter else None
        outcome = dict(step.get("outcome") or {})
        if target is None or target is qrt or target.name in self.visited:
            outcome.update({"kind": "dropped", "reason": reason})
            step["outcome"] = outcome
            self.end(qrt.name, "dropped", reason=reason)
            return None
        outcome.update({"kind": "dead_lettered", "reason": reason, "to": target.name})
        if failure:
            outcome["failure"] = failure
        step["outcome"] = outcome
        letter = dead_lettered(message, reason, qrt.name, detail, extra)
        return target, letter, "dead_letter", {"queue": qrt.name, "reason": reason}

    def dead_letter_copy(
        self, qrt: QueueRuntime, message: Message, letter: tuple[str, str | None, dict | None]
    ) -> Hop | None:
        """A COPY's target named by the message does not exist: its dead letter goes instead
        (or is dropped); the message itself goes on (rules.py _copy)."""
        target = self.engine._target_named(qrt.dead_letter) if qrt.dead_letter else None
        reason, detail, extra = letter
        if target is None or target is qrt or target.name in self.visited:
            self.end(qrt.name, "dropped", reason=reason)
            return None
        dead = dead_lettered(message, reason, qrt.name, detail, extra)
        return target, dead, "dead_letter", {"queue": qrt.name, "reason": reason}


def why_not_met(
    matches: Sequence[tuple[str, str, str]], selects: Callable[[Message], bool] | None
) -> Callable[[Message], dict[str, Any] | None]:
    """The verdict of a WHEN made of MATCH conditions (operator, pattern, canonical field;
    the indexed one first) and a filter compiled by `compile_filter` (or None), as a
    function of one message: None when the message meets every condition and the filter,
    else why not: {"reason": "condition 2 failed: ...", "condition": 2}, or {"reason":
    "filter is FALSE" or "filter is UNKNOWN (...)", "filter": "false" or "unknown"}.
    Decided as the routing table decides it (the same indexes, the same header text),
    compiled once for many messages (the console's preview). InvalidSelector for a bad
    pattern."""
    conditions = [(number, match, *_compiled(match)) for number, match in enumerate(matches, 1)]
    truth = None if selects is None else selects.truth  # type: ignore[attr-defined]

    def judge(message: Message) -> dict[str, Any] | None:
        for number, (operator, pattern, field), meets, read in conditions:
            if not meets(message):
                value = read(message)
                seen = "it has none" if value is None else f"it is {value[:SHOWN]!r}"
                reason = f"condition {number} failed: {field} {operator} {pattern} ({seen})"
                return {"reason": reason, "condition": number}
        if truth is None:
            return None
        found = truth(message)
        if found is True:
            return None
        if found is False:
            return {"reason": "filter is FALSE", "filter": "false"}
        return {
            "reason": "filter is UNKNOWN (a header it reads is missing or of another kind)",
            "filter": "unknown",
        }

    return judge


@functools.lru_cache(maxsize=4096)
def _compiled(match: tuple[str, str, str]) -> tuple[Callable[[Message], bool], Callable]:
    """A MATCH condition's matcher and field reader, compiled once for every explanation
    (a queue of 2,000 regex selectors cost 0.5 s an explanation, under the engine lock,
    compiling them again each time)."""
    return condition_matcher(match), field_reader(match[2])


def default_passes(matched: Sequence[int], said: str = "") -> str:
    """Why a DEFAULT selector does not act on a message: the selectors `matched` (their
    ids, in order) match it (rule 6); `said`, what the first does, for a reader who does
    not see it beside."""
    shown = ", ".join(str(number) for number in matched[:10]) + (" ..." if matched[10:] else "")
    which = f"selector {shown} matches it" if len(matched) == 1 else f"selectors {shown} match it"
    if said:
        said = f" ({said[:SHOWN]})" if len(matched) == 1 else f" ({matched[0]}: {said[:SHOWN]})"
    return f"default: acts only when no other selector matches, and {which}{said}"


def _in_order(qrt: QueueRuntime) -> list[SelectorRuntime]:
    return [qrt.selectors[number] for number in sorted(qrt.selectors)]


def _why_not_taken(sel: SelectorRuntime, taker: SelectorRuntime | None) -> str:
    """Why a matching taker would not take the message (mirrors rules._choose_taker)."""
    if sel.replay_next is not None:
        return "still catching up on the queue's history (start_at)"
    if sel.held:
        return "held: its target's destinations are away"
    if not sel.ready:
        return "its target queue does not exist"
    if sel.state.credit == 0 and sel.action != "delete":
        return "no credit"
    if taker is not None:
        return f"selector {taker.id} takes it: its turn comes first (round-robin)"
    return "cannot take now"


def _held_until_settled(sel: SelectorRuntime, queue: str, shard: str, acked: bool = False) -> str:
    """What a MOVE into another shard's queue holds here (forwarding.py, docs/scaling.md):
    its entry stays outstanding at the selector, with the credit it took, until that shard
    settles it back, whichever way it leaves the queue there (rules.py _settle). `acked`:
    a DELIVER's MOVE into its delivery queue, whose settlement counts as its ack here."""
    unlimited = sel.state.credit < 0
    held = "its credit is unlimited" if unlimited else "holding one of its credits"
    back = [] if unlimited else ["its credit back"]
    if acked:
        back.append("counted confirmed here")
        ways = "acked by a consumer there, or dead-lettered or dropped there, which settles it too"
    else:
        ways = "confirmed or deleted further on, only copied on, dead-lettered or dropped"
    settles = f"settles it back ({' and '.join(back)})" if back else "settles it back"
    return (
        f"it stays outstanding at selector {sel.id} ({held}) until shard {shard!r} {settles} "
        f"when it leaves {queue!r} there in any way: {ways}"
    )


def _target_missing(sel: SelectorRuntime) -> bool:
    """Whether a taker cannot take only because its fixed target queue does not exist."""
    return sel.replay_next is None and not sel.held and not sel.ready


HIDDEN = "a queue you may not read"


def visible_to(said: dict[str, Any], may_read: Callable[[str], bool]) -> dict[str, Any]:
    """An explanation as a caller who may read only the queues `may_read` allows sees it
    (the service's API and console; a trace shows only the steps at queues it may read).
    Where the walk enters a queue the caller may not read, that step says only how the
    message got there and that it goes on into a queue it may not read; the steps reached
    through it are left out, and so are their ends (one end says the message goes on out
    of sight). So nothing of such a queue shows: no depth, selectors, verdicts, outcome,
    dead-letter queue or what it routes to. A target the message names (`target_from`)
    that the caller may not read is not named either, and whether such a queue exists is
    not told: a name that finds no queue reads as one found and out of sight (its dead
    letter is left out too)."""
    shown: set[str] = set()
    failing: set[str] = set()  # shown queues where a hidden name found no queue
    steps: list[dict[str, Any]] = []
    out_of_sight = False
    for step in said["steps"]:
        came = step.get("from")
        if came is not None and (
            came.get("queue") not in shown
            or (came.get("queue") in failing and came.get("reason") in NAMED_FAILURES)
        ):
            continue  # reached through a queue the caller does not see
        if not may_read(step["queue"]):
            steps.append({"queue": None, "hidden": True, "arrives_by": step.get("arrives_by"),
                          "from": came, "said": f"goes on into {HIDDEN}"})  # fmt: skip
            out_of_sight = True
            continue
        shown.add(step["queue"])
        verdicts, step = step.get("selectors", ()), {**step, "selectors": []}
        unnamed: set[str] = set()  # targets named by the message, out of sight
        as_found: list[dict[str, Any]] = []  # steps a name that found no queue reads as
        for verdict in verdicts:
            failure = verdict.get("target_failure") or {}
            named = verdict.get("target") or failure.get("target")
            if verdict.get("target_from") is not None and named and not may_read(named):
                verdict = {k: v for k, v in verdict.items()
                           if k not in ("target", "target_failure")}  # fmt: skip
                verdict.update(target=None, target_hidden=HIDDEN)
                out_of_sight = True
                unnamed.add(named)
                if failure:
                    failing.add(step["queue"])
                    if verdict.get("action") in ("copy", "move", "bounce"):
                        came = {"queue": step["queue"], "selector": verdict.get("selector")}
                        as_found.append({"queue": None, "hidden": True,
                                         "arrives_by": verdict.get("action"), "from": came,
                                         "said": f"goes on into {HIDDEN}"})  # fmt: skip
            step["selectors"].append(verdict)
        outcome = step.get("outcome") or {}
        if unnamed and (
            outcome.get("to") in unnamed
            or (step["queue"] in failing and outcome.get("reason") in NAMED_FAILURES)
        ):
            step["outcome"] = {"kind": "out_of_sight", "said": f"goes on into {HIDDEN}"}
        steps.append(step)
        steps.extend(as_found)
    ends = [end for end in said["ends"] if end.get("queue") in shown and not (
        end.get("queue") in failing and end.get("reason") in NAMED_FAILURES)]  # fmt: skip
    if out_of_sight:
        ends.append({"queue": None, "outcome": "out_of_sight", "said": f"goes on into {HIDDEN}"})
    return {**said, "steps": steps, "ends": ends}


# the dead-letter reasons of a target the message named and no queue answered to
NAMED_FAILURES = ("no-such-queue", "no-target")
