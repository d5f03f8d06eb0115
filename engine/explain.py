"""Explain: route a message on paper (SPEC §12). The Engine inherits `explain`.

Theory of operation: `explain(queue, message)` walks the network as the routing rules
(rules.py) would for a message arriving now, and records instead of acting. At each queue
it meets, every selector gets a verdict: it copies, it takes, or why not (disabled, which
MATCH condition failed and on what value, the filter FALSE or UNKNOWN, no credit, held,
another taker's turn, the default or overflow rule); then the queue's outcome (taken,
copied only, waits for credit, held, dead-lettered, dropped) and the walk follows each copy,
move, bounce and dead letter to where the message would end.

Nothing changes: no counter, depth, credit, turn, history, journal event or mid is touched
(the message is checked as a publish checks it but keeps the mid it was given, or none).
Conditions are compiled per call (explain is not a hot path); the verdicts use the same
indexes and field readers as the routing table, so the paper agrees with the routing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.errors import InvalidArgument
from engine.fields import field_reader
from engine.message import Message
from engine.routing_table import SelectorRuntime, condition_matcher
from engine.rules import QueueRuntime, _bounced, _choose_taker, dead_lettered, is_name
from engine.selectors import all_matches, describe

MAX_STEPS = 200  # queues one explanation visits at most (a network is finite; so is paper)


class Explaining:
    """`explain`, as a method the Engine inherits."""

    _lock: Any
    _queues: dict[str, QueueRuntime]
    _queue: Callable[[object], QueueRuntime]
    _checked: Callable[..., Message]
    _time: Callable[[], float]
    dead_letter: str | None

    def explain(self, queue: str, message: Message) -> dict[str, Any]:
        """Where `message` would go if it were published to `queue` now, and why, as JSON-able
        data: {"queue", "steps": [one per queue met, in the order met], "ends": [...]}.
        Changes nothing. NotFound for an unknown queue; InvalidArgument for a message that
        `publish` would refuse."""
        if not isinstance(message, Message):
            raise InvalidArgument(f"explain takes a Message, not {type(message).__name__}")
        mid = message.mid if isinstance(message.mid, str) and message.mid else "(explain)"
        message = self._checked(message._replace(mid=mid), True)  # keeps it: no serial used
        with self._lock:
            first = self._queue(queue)
            walk = _Walk(self)
            walk.arrive(first, message, "publish", None)
            return {"queue": first.name, "mid": message.mid, "steps": walk.steps, "ends": walk.ends}


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
        self, qrt: QueueRuntime, message: Message, how: str, source: dict[str, Any] | None
    ) -> None:
        step: dict[str, Any] = {"queue": qrt.name, "arrives_by": how, "from": source}
        if len(self.steps) >= MAX_STEPS:
            step["outcome"] = {"kind": "not followed", "reason": f"over {MAX_STEPS} queues"}
            self.steps.append(step)
            return
        self.steps.append(step)
        self.visited.add(qrt.name)
        state = qrt.state
        step["ahead"] = state.depth()  # messages it would wait behind (FIFO)
        expires = qrt.expires_at(message)
        if expires is not None and expires <= self.now:
            step["selectors"] = []
            self.dead_letter(step, qrt, message, "expired")
            return
        full = qrt.limit is not None and state.depth() >= qrt.limit
        step["full"] = full
        verdicts = [self.verdict(qrt, sel, message, full) for sel in _in_order(qrt)]
        step["selectors"] = verdicts
        matched = [v for v in verdicts if v["meets"]]
        plain = [v for v in matched if v["when"] not in ("default", "overflow")]
        if full:
            chosen = [v for v in matched if v["when"] == "overflow"]
            if not chosen:
                self.dead_letter(step, qrt, message, "overflow")
                return
        elif plain:
            chosen = plain
            for v in matched:
                if v["when"] == "default":
                    v["meets"] = False
                    v["reason"] = "default: acts only when no other selector matches"
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
                self.dead_letter(step, qrt, message, "unroutable")
                return
        self.act(step, qrt, message, chosen)

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
        if not spec.enabled:
            v["reason"] = "disabled"
            return v
        if spec.when == "overflow" and not full:
            v["reason"] = "overflow: acts only on a message arriving at a full queue"
            return v
        if spec.when != "overflow" and full:
            v["reason"] = "the queue is full: only its overflow selector acts"
            return v
        if spec.when == "match":
            for number, match in enumerate(all_matches(spec), 1):
                if not condition_matcher(match)(message):
                    operator, pattern, field = match
                    value = field_reader(field)(message)
                    seen = "it has none" if value is None else f"it is {value[:200]!r}"
                    v["reason"] = (
                        f"condition {number} failed: {field} {operator} {pattern} ({seen})"
                    )
                    v["condition"] = number
                    return v
            if sel.matches is not None:
                truth = sel.matches.truth(message)  # type: ignore[attr-defined]
                if truth is not True:
                    v["reason"] = (
                        "filter is FALSE"
                        if truth is False
                        else "filter is UNKNOWN (a header it reads is missing or of another kind)"
                    )
                    v["filter"] = "false" if truth is False else "unknown"
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
            self.dead_letter(step, qrt, message, "overflow")  # rule 7: no overflow taker
            return
        if takers and taker is None:
            step["outcome"] = {
                "kind": "waits",
                "reason": "takers matched but none can take it now (rule 4): it waits in order",
            }
            self.end(qrt.name, "waits for credit")
            return
        follow: list[tuple[QueueRuntime, Message, str, dict]] = []
        for sel in copies:
            v = by_id[sel.id]
            v["verdict"] = "copies"
            target, failure = self.target_of(qrt, sel, message)
            if target is None:
                v["target_failure"] = failure
                self.dead_letter_copy(qrt, message, failure, follow)
            elif target.name in self.visited:
                v["reason"] = f"already arrived in {target.name!r} in this step: not copied twice"
            else:
                v["target"] = target.name
                follow.append((target, message, "copy", {"queue": qrt.name, "selector": sel.id}))
        if taker is None:
            step["outcome"] = {"kind": "processed", "reason": "only copies took it (rule 5)"}
            self.end(qrt.name, "history" if qrt.history else "processed")
        else:
            self.take(step, qrt, taker, by_id[taker.id], message, follow)
        for target, moved, how, source in follow:
            if target.name in self.visited and how != "dead_letter":
                continue
            if target.remote is not None:  # another shard's: its engine routes it there
                self.end(target.name, "forwarded", shard=target.remote, by=how)
                continue
            self.arrive(target, moved, how, source)

    def take(
        self,
        step: dict[str, Any],
        qrt: QueueRuntime,
        sel: SelectorRuntime,
        v: dict[str, Any],
        message: Message,
        follow: list,
    ) -> None:
        action = sel.action
        source = {"queue": qrt.name, "selector": sel.id}
        if action == "delete":
            step["outcome"] = {"kind": "deleted", "selector": sel.id}
            self.end(qrt.name, "deleted", selector=sel.id)
            return
        if sel.target_from is not None:
            target, failure = self.target_of(qrt, sel, message)
            if target is None:
                v["target_failure"] = failure
                step["outcome"] = {"kind": "taken", "selector": sel.id, "action": action}
                self.dead_letter(step, qrt, message, failure["reason"], failure)
                return
        elif action == "deliver":
            target = sel.target
        else:
            target = sel.target_queue
        if action == "deliver":
            v["target"] = target
            step["outcome"] = {"kind": "delivered", "selector": sel.id, "destination": target}
            self.end(qrt.name, "delivered", destination=target, selector=sel.id)
            return
        v["target"] = target.name  # type: ignore[union-attr]
        if target.name in self.visited:  # type: ignore[union-attr]
            step["outcome"] = {"kind": "taken", "selector": sel.id, "action": action}
            self.dead_letter(step, qrt, message, "unroutable", {"reason": "a loop of moves"})
            return
        step["outcome"] = {"kind": "taken", "selector": sel.id, "action": action,
                           "to": target.name}  # type: ignore[union-attr]  # fmt: skip
        moved = _bounced(message) if action == "bounce" else message
        follow.append((target, moved, action, source))

    def target_of(
        self, qrt: QueueRuntime, sel: SelectorRuntime, message: Message
    ) -> tuple[Any, dict[str, Any] | None]:
        """The selector's target for this message; for `target_from`, as rules.py finds it."""
        if sel.target_from is None:
            return sel.target_queue, None
        name = sel.target_from(message)
        field = sel.spec.target_from
        if not name:
            return None, {"reason": "no-target", "detail": f"the message has no {field}"}
        if sel.action == "deliver":
            if not is_name(name) or name[0] == "$":
                return None, {"reason": "no-target", "detail": f"{field} is no destination name"}
            return name, None
        target = self.engine._queues.get(name)
        if target is None:
            reason = "no-such-queue" if is_name(name) else "no-target"
            return None, {"reason": reason, "target": name[:200]}
        if target is qrt:
            return None, {"reason": "unroutable", "detail": f"{field} names its own queue"}
        return target, None

    def dead_letter(
        self,
        step: dict[str, Any],
        qrt: QueueRuntime,
        message: Message,
        reason: str,
        failure: dict[str, Any] | None = None,
    ) -> None:
        target = self.engine._queues.get(qrt.dead_letter) if qrt.dead_letter else None
        outcome = dict(step.get("outcome") or {})
        if target is None or target is qrt or target.name in self.visited:
            outcome.update({"kind": "dropped", "reason": reason})
            step["outcome"] = outcome
            self.end(qrt.name, "dropped", reason=reason)
            return
        outcome.update({"kind": "dead_lettered", "reason": reason, "to": target.name})
        if failure:
            outcome["failure"] = failure
        step["outcome"] = outcome
        letter = dead_lettered(message, reason, qrt.name)
        self.arrive(target, letter, "dead_letter", {"queue": qrt.name, "reason": reason})

    def dead_letter_copy(
        self, qrt: QueueRuntime, message: Message, failure: dict[str, Any], follow: list
    ) -> None:
        target = self.engine._queues.get(qrt.dead_letter) if qrt.dead_letter else None
        reason = failure["reason"]
        if target is None or target is qrt or target.name in self.visited:
            self.end(qrt.name, "dropped", reason=reason)
            return
        letter = dead_lettered(message, reason, qrt.name)
        follow.append((target, letter, "dead_letter", {"queue": qrt.name, "reason": reason}))


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
