"""The Selector object applications configure: WHEN + DO + credit (SPEC §1, §3).

A `Selector` is a handle (queue name + id) on the engine's wiring. Every method validates
its input before it takes the engine lock and changes nothing on error; changes go to the
selector's spec (saved in the catalog) and its runtime (re-registered in the queue's
routing table). `when_*`, `do_*`, `start_at` and `set_credit` return the selector so calls chain;
`enable` and `credit` return the Deliveries they caused.

A selector knows its engine only as a `SelectorHost`: the few things a selector may ask of
the engine, which core.py implements. The arrow runs one way: core.py makes Selectors and
imports this module; this module never imports core.py.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from engine.catalog import SelectorSpec
from engine.errors import InvalidArgument, InvalidSelector, NotFound
from engine.fields import check_field
from engine.filters import compile_filter
from engine.matching import check_pattern
from engine.routing_table import QUEUE_ACTIONS
from engine.validation import MAX_SEQ, MAX_WIRING, check_count, check_name

MAX_CONDITIONS = 16  # MATCH conditions of one selector (SPEC §12); more is a mistake

if TYPE_CHECKING:
    from engine.message import Delivery
    from engine.routing_table import SelectorRuntime
    from engine.rules import QueueRuntime


class SelectorHost(Protocol):
    """What a Selector may ask of the engine that made it. Everything but `lock` and
    `selector_delete` expects the caller to hold `lock`."""

    lock: AbstractContextManager[Any]  # the engine lock (re-entrant)

    def runtimes(self, queue: str, selector_id: int) -> tuple[QueueRuntime, SelectorRuntime]:
        """The queue's and the selector's runtimes; NotFound when either is gone."""
        ...

    def queue_runtime(self, name: str) -> QueueRuntime | None:
        """The runtime of queue `name`, None when there is no such queue."""
        ...

    def deliver_elsewhere(self, destination: str) -> str | None:
        """The shard `destination` is read on when a DELIVER to it cannot be made here (a
        shard router's engine whose destination's home has no delivery queue for it,
        forwarding.py's set_local_shard); else None."""
        ...

    def untarget(self, sel: SelectorRuntime) -> None:
        """Forget that `sel` sends into the queue it targets now (before it is re-pointed)."""
        ...

    def target(self, sel: SelectorRuntime, queue: QueueRuntime | None) -> None:
        """Point `sel` at `queue` (None: a DO without a target queue) and remember it, so
        that `sel` follows when a queue of that name is created or deleted."""
        ...

    def wiring_changed(self, qrt: QueueRuntime, sel: SelectorRuntime) -> None:
        """`sel`'s WHEN, DO or enabled changed: register it again in its queue's routing table and
        save it in the catalog."""
        ...

    def save_selector(self, spec: SelectorSpec) -> None:
        """Save the selector's wiring in the catalog (which may refuse, raising)."""
        ...

    def run(self, operation: Callable[..., object], *args: object) -> list[Delivery]:
        """Run one state change as an engine operation (routing whatever it made
        routable); the Deliveries it caused."""
        ...

    def credit_arrived(self, qrt: QueueRuntime, sel: SelectorRuntime) -> None:
        """`sel` got credit: replay or route what waited for it (inside `run`)."""
        ...

    def selector_enabled(self, qrt: QueueRuntime, sel: SelectorRuntime) -> None:
        """`sel` was just enabled: replay the history from its start, then route the queue
        (inside `run`)."""
        ...

    def selector_resumed(
        self, qrt: QueueRuntime, sel: SelectorRuntime, position: tuple[int, int] | None
    ) -> None:
        """`sel` was enabled again after a pause: a replay under way goes on from
        `position`, then the queue is routed (inside `run`)."""
        ...

    def selector_delete(self, queue: str, selector_id: int) -> list[Delivery]:
        """Engine.selector_delete."""
        ...


class Selector:
    __slots__ = ("_host", "id", "queue")

    def __init__(self, host: SelectorHost, queue: str, selector_id: int) -> None:
        self._host = host
        self.queue = queue
        self.id = selector_id

    def __repr__(self) -> str:
        spec = self.spec
        state = "enabled" if spec.enabled else "disabled"
        what = f"{describe_when(spec)} -> {describe_do(spec)}"
        return f"<Selector {self.queue}#{self.id} {what} {state}>"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Selector)
            and other._host is self._host
            and (other.queue, other.id) == (self.queue, self.id)
        )

    def __hash__(self) -> int:
        return hash((self.queue, self.id))

    # -- what it is ------------------------------------------------------------------------
    def _runtime(self) -> tuple[QueueRuntime, SelectorRuntime]:
        """The queue and selector runtimes; the caller holds the engine lock."""
        return self._host.runtimes(self.queue, self.id)

    @property
    def spec(self) -> SelectorSpec:
        """A copy of the selector's wiring."""
        with self._host.lock:
            spec = self._runtime()[1].spec
            return SelectorSpec(**{name: getattr(spec, name) for name in SelectorSpec.__slots__})

    @property
    def enabled(self) -> bool:
        return self.spec.enabled

    @property
    def when(self) -> str | None:
        """The WHEN as text: "topic stock.*", "filter priority > 5", "always", ..."""
        spec = self.spec
        return describe_when(spec) if spec.when else None

    @property
    def action(self) -> str | None:
        return self.spec.action

    @property
    def target(self) -> str | None:
        return self.spec.target

    @property
    def start(self) -> str | int:
        return self.spec.start

    @property
    def available_credit(self) -> int:
        """Credit left (-1 = unlimited)."""
        with self._host.lock:
            return self._runtime()[1].state.credit

    @property
    def held(self) -> bool:
        """Whether it takes nothing for now: a MOVE into a worker queue whose destinations
        are away (Engine.absent); the work goes to the other workers meanwhile."""
        with self._host.lock:
            return self._runtime()[1].held

    @property
    def outstanding(self) -> int:
        """Messages taken by this selector and not yet settled."""
        with self._host.lock:
            return len(self._runtime()[1].state.outstanding)

    # -- WHEN ------------------------------------------------------------------------------
    def when_match(self, operator: str, pattern: str, field: str = "address") -> Selector:
        """Match the address (or `field`: "return_address", "header:<name>" or a header
        name): eq, topic, prefix or regex. Sets the first and only MATCH (`and_match` adds
        more); combines with a filter (match AND filter)."""
        match = checked_match(operator, pattern, field)
        return self._set_when("match", match=match)

    def and_match(self, operator: str, pattern: str, field: str = "address") -> Selector:
        """Add a MATCH condition: the selector then takes a message only when every MATCH
        and the filter hold (SPEC §12). The first MATCH is the one the routing table
        indexes; a selector without one gets this one as its first."""
        match = checked_match(operator, pattern, field)
        with self._host.lock:
            spec = self._runtime()[1].spec
            if spec.when not in (None, "match"):
                raise InvalidSelector(
                    f"selector {self.id} on queue {self.queue!r} is a {spec.when} selector; "
                    "and_match adds to a match (set the first with when_match)"
                )
            if spec.when is None or spec.match is None:
                return self._set_when("match", match=match)
            if len(spec.more_matches) + 1 >= MAX_CONDITIONS:
                raise InvalidSelector(
                    f"a selector holds at most {MAX_CONDITIONS} match conditions; "
                    f"selector {self.id} on queue {self.queue!r} has {MAX_CONDITIONS} already"
                )
            return self._set_when("match", match=spec.match, more=(*spec.more_matches, match))

    def when_matches(self, matches: list[tuple[str, str, str]]) -> Selector:
        """Set every MATCH condition at once (the first is indexed); all must hold. Checked
        whole before anything changes."""
        checked = checked_matches(matches)
        return self._set_when("match", match=checked[0], more=checked[1:])

    def when_filter(self, expression: str) -> Selector:
        """A JMS / SQL-92 selector expression over headers (docs/filters.md). Combines with
        a match (match AND filter)."""
        return self._set_when("filter", expression=expression, compiled=compile_filter(expression))

    def when_always(self) -> Selector:
        return self._set_when("always")

    def when_default(self) -> Selector:
        """Acts only on messages no other selector of the queue matched."""
        return self._set_when("default")

    def when_overflow(self) -> Selector:
        """Acts only on messages arriving at the queue while it is full."""
        return self._set_when("overflow")

    def _set_when(
        self,
        kind: str,
        match: tuple[str, str, str] | None = None,
        expression: str | None = None,
        compiled=None,  # type: ignore[no-untyped-def]
        more: tuple[tuple[str, str, str], ...] = (),
    ) -> Selector:
        with self._host.lock:
            qrt, sel = self._runtime()
            spec = sel.spec
            combining = spec.when == "match"  # a match and a filter make one WHEN
            if kind == "match":
                spec.match, spec.filter = match, spec.filter if combining else None
                spec.more_matches = more
                compiled = sel.matches if spec.filter is not None else None
            elif kind == "filter":
                spec.match, spec.filter = spec.match if combining else None, expression
                spec.more_matches = spec.more_matches if combining else ()
                kind = "match"
            else:
                spec.match, spec.filter, compiled = None, None, None
                spec.more_matches = ()
            spec.when = kind
            sel.refresh(compiled)
            self._host.wiring_changed(qrt, sel)
        return self

    # -- DO --------------------------------------------------------------------------------
    # A target is fixed (`queue` / `destination`) or read from each message's envelope
    # (`target_from`: a field as for MATCH, SPEC §12): exactly one of the two.
    def do_copy(self, queue: str | None = None, *, target_from: str | None = None) -> Selector:
        return self._set_action("copy", queue, target_from)

    def do_move(self, queue: str | None = None, *, target_from: str | None = None) -> Selector:
        return self._set_action("move", queue, target_from)

    def do_bounce(self, queue: str | None = None, *, target_from: str | None = None) -> Selector:
        return self._set_action("bounce", queue, target_from)

    def do_deliver(
        self, destination: str | None = None, *, target_from: str | None = None
    ) -> Selector:
        return self._set_action("deliver", destination, target_from)

    def do_delete(self) -> Selector:
        return self._set_action("delete", None)

    def _set_action(
        self, action: str, target: str | None, target_from: str | None = None
    ) -> Selector:
        host = self._host
        if target_from is not None:
            if target is not None:
                raise InvalidSelector(
                    f"give a fixed target ({target[:60]!r}) or target_from, not both"
                    if isinstance(target, str)
                    else "give a fixed target or target_from, not both"
                )
            target_from = check_field(target_from)
        elif action in QUEUE_ACTIONS:
            check_name("target queue", target, allow_reserved=True)
            if target == self.queue:
                raise InvalidSelector(
                    f"a selector cannot {action} messages into its own queue {self.queue!r}"
                )
        elif action == "deliver":
            check_name("destination", target)
            home = host.deliver_elsewhere(target)  # type: ignore[arg-type]
            if home is not None:
                raise InvalidSelector(
                    f"destination {target!r} is read on shard {home!r}, which has no queue "
                    f"{target!r} to deliver it (its delivery queue): make one there first"
                )
        with host.lock:
            qrt, sel = self._runtime()
            target_queue = None
            if action in QUEUE_ACTIONS and target_from is None:
                target_queue = host.queue_runtime(target)  # type: ignore[arg-type]
                if target_queue is None:
                    raise NotFound(f"target queue {target!r} does not exist; create it first")
            host.untarget(sel)
            sel.spec.action, sel.spec.target = action, target
            sel.spec.target_from = target_from
            sel.refresh(sel.matches)
            host.target(sel, target_queue)
            host.wiring_changed(qrt, sel)
        return self

    # -- flow ------------------------------------------------------------------------------
    def start_at(self, start: str | int) -> Selector:
        """Where a newly enabled selector starts: "current" (live traffic only), "head"
        (the whole history first) or a seq of the history."""
        if start not in ("head", "current") and (
            not isinstance(start, int) or isinstance(start, bool) or not 1 <= start <= MAX_SEQ
        ):
            raise InvalidArgument(
                f"start must be 'head', 'current' or a seq from 1 to {MAX_SEQ}, not {start!r}"[:300]
            )
        with self._host.lock:
            sel = self._runtime()[1]
            sel.spec.start = start
            self._host.save_selector(sel.spec)
        return self

    def set_credit(self, credit: int) -> Selector:
        """Set the remaining credit (-1 = unlimited). Routes nothing by itself; use
        `credit(n)` to top up and receive what it unblocks."""
        check_count("credit", credit, minimum=-1, maximum=MAX_WIRING)
        with self._host.lock:
            sel = self._runtime()[1]
            before = sel.spec.credit
            sel.spec.credit = credit
            try:
                self._host.save_selector(sel.spec)  # first: it may refuse
            except BaseException:
                sel.spec.credit = before
                raise
            try:
                # inside an operation, so persistent stores commit the change
                self._host.run(setattr, sel.state, "credit", credit)
            except BaseException:
                sel.spec.credit = before
                self._host.save_selector(sel.spec)
                raise
        return self

    def credit(self, n: int) -> list[Delivery]:
        """Add `n` credits; returns the Deliveries that unblocked."""
        check_count("credit", n, minimum=1, maximum=MAX_WIRING)
        host = self._host
        with host.lock:
            qrt, sel = self._runtime()
            if sel.state.credit < 0:
                return []  # unlimited already
            if sel.state.credit + n > MAX_WIRING:
                raise InvalidArgument(
                    f"selector {self.id} has {sel.state.credit} credit; adding {n} would pass "
                    f"the most a selector holds ({MAX_WIRING:,}); set -1 for unlimited"
                )

            def top_up() -> None:
                sel.state.credit += n
                host.credit_arrived(qrt, sel)

            return host.run(top_up)

    def enable(self, enabled: bool = True) -> list[Delivery]:
        """Turn routing by this selector on (or off); returns the Deliveries it caused."""
        if not isinstance(enabled, bool):
            raise InvalidArgument(f"enable takes True or False, not {enabled!r}")
        host = self._host
        with host.lock:
            qrt, sel = self._runtime()
            spec = sel.spec
            if enabled:
                self._check_complete(spec)
            if spec.enabled == enabled:
                return []
            spec.enabled = enabled
            host.wiring_changed(qrt, sel)
            if not enabled:
                sel.replay_next = None
                return []
            return host.run(host.selector_enabled, qrt, sel)

    def disable(self) -> list[Delivery]:
        return self.enable(False)

    def pause(self) -> tuple[int, int] | None:
        """Disable it for a change of its wiring that `resume` ends (the service's selector
        update): it routes nothing meanwhile. Returns where a history replay under way
        stood (for `resume`), or None."""
        with self._host.lock:
            sel = self._runtime()[1]
            position = None if sel.replay_next is None else (sel.replay_next, sel.replay_end)
            self.enable(False)
            return position

    def resume(self, position: tuple[int, int] | None = None) -> list[Delivery]:
        """Enable it again after `pause`: it goes on where it was, not as a newly enabled
        selector (no history replayed anew; a replay under way when it paused, at
        `position`, goes on), and routes the messages waiting in its queue (its WHEN may
        take some now). Returns the Deliveries it caused."""
        host = self._host
        with host.lock:
            qrt, sel = self._runtime()
            if sel.spec.enabled:
                return []
            if position is not None and sel.spec.when in ("default", "overflow"):
                position = None  # those never replay (Engine's selector_enabled)
            self._check_complete(sel.spec)
            sel.spec.enabled = True
            host.wiring_changed(qrt, sel)
            return host.run(host.selector_resumed, qrt, sel, position)

    def delete(self) -> list[Delivery]:
        return self._host.selector_delete(self.queue, self.id)

    def _check_complete(self, spec: SelectorSpec) -> None:
        """A selector routes only with a WHEN and a DO."""
        if spec.when is None:
            raise InvalidSelector(
                f"selector {spec.id} on queue {self.queue!r} has no WHEN; "
                "set one with when_match, when_filter, when_always, ..."
            )
        if spec.action is None:
            raise InvalidSelector(
                f"selector {spec.id} on queue {self.queue!r} has no DO; "
                "set one with do_copy, do_move, do_deliver, ..."
            )


def checked_match(operator: object, pattern: object, field: object) -> tuple[str, str, str]:
    """(operator, pattern, canonical field) of one MATCH; InvalidSelector when it is bad."""
    check_pattern(operator, pattern)  # type: ignore[arg-type]
    return (operator, pattern, check_field(field))  # type: ignore[return-value]


def checked_matches(matches: object) -> tuple[tuple[str, str, str], ...]:
    """A whole list of MATCHes, each (operator, pattern[, field]) or a dict with those keys,
    checked before anything is changed."""
    if not isinstance(matches, (list, tuple)) or not matches:
        raise InvalidSelector("matches must be a non-empty list of match conditions")
    if len(matches) > MAX_CONDITIONS:
        raise InvalidSelector(
            f"{len(matches)} match conditions; a selector holds at most {MAX_CONDITIONS}"
        )
    checked = []
    for number, match in enumerate(matches, 1):
        if isinstance(match, dict):
            unknown = set(match) - {"operator", "pattern", "field"}
            if unknown:
                raise InvalidSelector(
                    f"match condition {number} has unknown key(s): "
                    + ", ".join(sorted(str(key)[:40] for key in unknown))
                )
            field = match.get("field")  # only a missing field is the address; "" is refused
            field = "address" if field is None else field
            match = (match.get("operator"), match.get("pattern"), field)
        if not isinstance(match, (list, tuple)) or len(match) not in (2, 3):
            raise InvalidSelector(
                f"match condition {number} must be (operator, pattern, field) or "
                "{operator, pattern, field}"
            )
        try:
            checked.append(checked_match(*match, *(("address",) if len(match) == 2 else ())))
        except InvalidSelector as exc:
            raise InvalidSelector(f"match condition {number}: {exc}", exc.column) from None
    return tuple(checked)


def describe_when(spec: SelectorSpec) -> str:
    if spec.when is None:
        return "(no WHEN)"
    if spec.when != "match":
        return spec.when
    parts = []
    for operator, pattern, field in all_matches(spec):
        on = "" if field == "address" else f" on {field}"
        parts.append(f"{operator}{on} {pattern}")
    if spec.filter is not None:
        parts.append(f"filter {spec.filter}")
    return " and ".join(parts)


def all_matches(spec: SelectorSpec) -> tuple[tuple[str, str, str], ...]:
    """Every MATCH condition of the selector, the indexed one first."""
    return () if spec.match is None else (spec.match, *spec.more_matches)


def describe_do(spec: SelectorSpec) -> str:
    if spec.action is None:
        return "(no DO)"
    if spec.target_from is not None:
        what = "destination" if spec.action == "deliver" else "queue"
        return f"{spec.action} to the {what} named by {spec.target_from}"
    return spec.action if spec.target is None else f"{spec.action} {spec.target}"


OPERATOR_WORDS = {
    "eq": "is",
    "topic": "matches topic",
    "prefix": "starts with",
    "regex": "matches",
}
ACTION_WORDS = {
    "copy": "copy to",
    "move": "move to",
    "bounce": "bounce to",
    "deliver": "deliver to",
}


def describe_in_words(
    when: str | None,
    match: tuple[str, str, str] | None,
    expression: str | None,
    action: str | None,
    target: str | None,
    more: tuple[tuple[str, str, str], ...] = (),
    target_from: str | None = None,
) -> str:
    """WHEN → DO as a person reads it: "always → move to jobs:w1", "address matches topic
    eu.# and filter priority > 5 → copy to orders.eu", "when no other selector matches → delete"."""
    if when is None:
        said = "no WHEN yet"
    elif when == "always":
        said = "always"
    elif when == "default":
        said = "when no other selector matches"
    elif when == "overflow":
        said = "when this queue is full"
    else:
        parts = []
        for operator, pattern, field in () if match is None else (match, *more):
            parts.append(f"{field} {OPERATOR_WORDS.get(operator, operator)} {pattern}")
        if expression is not None:
            parts.append(f"filter {expression}")
        said = " and ".join(parts) or "match"
    if action is None:
        done = "no DO yet"
    elif target_from is not None:
        what = "destination" if action == "deliver" else "queue"
        done = f"{ACTION_WORDS.get(action, action)} the {what} {target_from} names"
    elif target is None or action == "delete":
        done = action
    else:
        done = f"{ACTION_WORDS.get(action, action)} {target}"
    return f"{said} → {done}"


def describe(spec: SelectorSpec) -> str:
    """A selector's WHEN → DO in words (see describe_in_words)."""
    return describe_in_words(
        spec.when,
        spec.match,
        spec.filter,
        spec.action,
        spec.target,
        spec.more_matches,
        spec.target_from,
    )
