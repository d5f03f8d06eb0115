"""A queue's routing table, kept up to date as its selectors change (SPEC §2 rule 1).

Theory of operation: each enabled selector is registered in exactly one place of its
queue's routing table: an index of matching.py for its first MATCH condition (one index per
field and operator; further conditions, SPEC §12, are checked on the index's hits only),
the unconditional list (ALWAYS and filter-only selectors), or the DEFAULT or OVERFLOW lists.
Changing a selector unregisters and re-registers just that selector, so wiring changes cost
O(1) per selector, not a rebuild. Routing a message asks the indexes for hits, runs filters
only on the hits and on filter-only selectors, and splits the answer into COPYs (in selector
order) and takers (chosen by the engine by credit and round-robin turn).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.catalog import SelectorSpec
from engine.fields import field_reader
from engine.matching import check_pattern, new_index
from engine.message import Message

if TYPE_CHECKING:
    from engine.stores.base import SelectorState

QUEUE_ACTIONS = frozenset({"copy", "move", "bounce"})


class SelectorRuntime:
    """What routing needs of one selector."""

    __slots__ = (
        "action",
        "conditions",
        "confirm_site",
        "held",
        "id",
        "is_copy",
        "matches",
        "queue",
        "ready",
        "registered",
        "replay_end",
        "replay_next",
        "spec",
        "state",
        "tag_prefix",
        "target",
        "target_from",
        "target_queue",
        "took_site",
        "turn",
    )

    def __init__(self, spec: SelectorSpec, state: SelectorState, turn: int) -> None:
        self.spec = spec
        self.id = spec.id
        self.state = state
        self.turn = turn  # round-robin position: the lowest turn among takers goes first
        self.action: str | None = None
        self.target: str | None = None
        self.is_copy = False
        self.matches: Callable[[Message], bool] | None = None  # compiled filter, if any
        # the MATCH conditions after the first, compiled: all must hold (SPEC §12)
        self.conditions: Callable[[Message], bool] | None = None
        # reads each message's target name when the target comes from the envelope
        self.target_from: Callable[[Message], str | None] | None = None
        # the runtime of the target queue for COPY/MOVE/BOUNCE; None while it does not exist
        self.target_queue: Any = None
        # False for a COPY/MOVE/BOUNCE whose target queue is missing, or while held
        self.ready = True
        self.held = False  # takes nothing for now (its target's destination is away)
        self.registered: tuple | None = None  # where the routing table holds it
        self.replay_next: int | None = None  # next history seq to replay (start_at)
        self.replay_end = 0
        self.tag_prefix = ""  # "<queue>:<id>:<engine prefix>." for delivery tags
        self.queue = ""  # the name of the queue it belongs to (set with tag_prefix)
        # the journal sites (event_journal.py) of what it does with a fixed target and of a
        # confirm; None when each message names its target
        self.took_site: tuple | None = None
        self.confirm_site: tuple | None = None
        self.refresh(None)

    def refresh(self, matches: Callable[[Message], bool] | None) -> None:
        spec = self.spec
        self.action = spec.action
        self.target = spec.target
        self.is_copy = self.action == "copy"
        self.matches = matches
        more = spec.more_matches if spec.when == "match" and spec.match is not None else ()
        self.conditions = conditions_matcher(more) if more else None
        self.target_from = field_reader(spec.target_from) if spec.target_from else None
        self.place(self.queue, self.tag_prefix)

    def place(self, queue: str, tag_prefix: str) -> None:
        """Belong to queue `queue`, its delivery tags starting with `tag_prefix`; make the
        journal sites of what it does (event_journal.py) once, not per event."""
        self.queue, self.tag_prefix = queue, tag_prefix
        if self.target_from is not None:
            self.took_site = self.confirm_site = None
            return
        action, target = self.action, self.target
        kind = "route" if action in QUEUE_ACTIONS else action
        self.took_site = (kind, queue, self.id, target)
        self.confirm_site = ("confirm", queue, self.id, target)

    def when_matcher(self) -> Callable[[Message], bool]:
        """Whether a message meets this selector's WHEN on its own (see `when_matcher`);
        DEFAULT and OVERFLOW, which depend on the other selectors, say always."""
        spec = self.spec
        if spec.when != "match":
            return when_matcher(None, self.matches)
        return when_matcher(spec.match, self.matches, spec.more_matches)

    def resolve(self, target_queue: Any) -> None:
        """Point at the target queue's runtime (None when it does not exist, or when each
        message names its own target)."""
        self.target_queue = target_queue
        self.ready = not self.held and (
            target_queue is not None
            or self.action not in QUEUE_ACTIONS
            or self.target_from is not None
        )

    def destination_of(self, message: Message) -> str | None:
        """Where this DELIVER sent `message`: its fixed destination, or the one the
        message's `target_from` field names (for journal events and recalled deliveries)."""
        read = self.target_from
        return self.target if read is None else read(message)

    def hold(self, held: bool) -> None:
        """Take nothing while `held` (as with no credit); see Engine.absent."""
        self.held = held
        self.resolve(self.target_queue)


def condition_matcher(match: tuple[str, str, str]) -> Callable[[Message], bool]:
    """Whether a message meets one MATCH (operator, pattern, canonical field), decided as the
    routing table decides it (the same index, the same header text)."""
    operator, pattern, field = match
    check_pattern(operator, pattern)
    index = new_index(operator)
    index.add(pattern, True)
    lookup = index.match
    read = field_reader(field)

    def meets(message: Message) -> bool:
        key = read(message)
        return key is not None and bool(lookup(key))

    return meets


def conditions_matcher(matches: tuple[tuple[str, str, str], ...]) -> Callable[[Message], bool]:
    """Whether a message meets every one of `matches` (compiled once, when wired)."""
    tests = tuple(condition_matcher(match) for match in matches)
    if len(tests) == 1:
        return tests[0]

    def meets(message: Message) -> bool:
        return all(test(message) for test in tests)

    return meets


def when_matcher(
    match: tuple[str, str, str] | None,
    matches: Callable[[Message], bool] | None,
    more: tuple[tuple[str, str, str], ...] = (),
) -> Callable[[Message], bool]:
    """Whether one message meets a WHEN made of MATCHes (operator, pattern, field), the
    first `match` then `more`, and/or a compiled filter, decided as the routing table decides
    it; neither given means always. For what looks at one selector alone: the replay of
    history (rule 13) and the console's preview. InvalidSelector for a bad pattern."""
    if match is None:
        return matches if matches is not None else _always
    condition = conditions_matcher((match, *more))

    def meets(message: Message) -> bool:
        if not condition(message):
            return False
        return matches is None or matches(message)

    return meets


def _always(message: Message) -> bool:
    return True


class RoutingTable:
    """A queue's routing table: which of its enabled selectors a message meets."""

    __slots__ = (
        "_filtered",
        "_indexed",
        "defaults",
        "fixed",
        "indexes",
        "overflows",
        "routing",
        "unconditional",
    )

    def __init__(self) -> None:
        self.unconditional: list[SelectorRuntime] = []
        # (field, operator) -> (field, its reader, the index of first MATCHes on it)
        self.indexes: dict[tuple[str, str], tuple[str, Callable[[Message], str | None], Any]] = {}
        self.defaults: list[SelectorRuntime] = []
        self.overflows: list[SelectorRuntime] = []
        # Rule 6: a queue with no enabled selectors besides OVERFLOW ones holds its messages.
        self.routing = 0  # number of enabled selectors other than OVERFLOW ones
        self._indexed = 0
        self._filtered = 0
        self.fixed: tuple[list[SelectorRuntime], list[SelectorRuntime]] | None = _NO_HITS

    def add(self, sel: SelectorRuntime) -> None:
        spec = sel.spec
        if spec.when == "overflow":
            self.overflows.append(sel)
            sel.registered = ("overflow",)
        elif spec.when == "default":
            self.defaults.append(sel)
            sel.registered = ("default",)
        elif spec.when == "always" or spec.match is None:
            self.unconditional.append(sel)
            self._filtered += sel.matches is not None
            sel.registered = ("unconditional", sel.matches is not None)
        else:
            operator, pattern, field = spec.match
            found = self.indexes.get((field, operator))
            if found is None:
                found = (field, field_reader(field), new_index(operator))
                self.indexes[(field, operator)] = found
            found[2].add(pattern, sel)
            self._indexed += 1
            sel.registered = ("index", field, operator, pattern)
        if spec.when != "overflow":
            self.routing += 1
        self._refresh()

    def remove(self, sel: SelectorRuntime) -> None:
        where = sel.registered
        if where is None:
            return
        sel.registered = None
        kind = where[0]
        if kind == "overflow":
            self.overflows.remove(sel)
        elif kind == "default":
            self.defaults.remove(sel)
        elif kind == "unconditional":
            self.unconditional.remove(sel)
            self._filtered -= where[1]
        else:
            _, field, operator, pattern = where
            self.indexes[(field, operator)][2].discard(pattern, sel)
            self._indexed -= 1
        if kind != "overflow":
            self.routing -= 1
        self._refresh()

    def _refresh(self) -> None:
        # The common case (only ALWAYS selectors without filters) needs no work per message.
        if not self._indexed and not self._filtered:
            self.fixed = split(self.unconditional)
        else:
            self.fixed = None

    def match(self, message: Message) -> tuple[list[SelectorRuntime], list[SelectorRuntime]]:
        """(copies in selector order, takers) whose WHEN holds for `message`."""
        if self.fixed is not None:
            return self.fixed
        hits = [sel for sel in self.unconditional if sel.matches is None or sel.matches(message)]
        for field, read, index in self.indexes.values():
            key = message.address if field == "address" else read(message)  # no call: hot
            if key is None:
                continue
            for sel in index.match(key):
                # the first condition found it; the others are checked on the hits only
                if sel.conditions is not None and not sel.conditions(message):
                    continue
                if sel.matches is None or sel.matches(message):
                    hits.append(sel)
        if not hits:
            return _NO_HITS
        return split(hits)

    def fallback(self) -> tuple[list[SelectorRuntime], list[SelectorRuntime]]:
        return split(self.defaults)

    def overflow(self) -> tuple[list[SelectorRuntime], list[SelectorRuntime]]:
        return split(self.overflows)


def split(hits: list[SelectorRuntime]) -> tuple[list[SelectorRuntime], list[SelectorRuntime]]:
    copies = [sel for sel in hits if sel.is_copy]
    if len(copies) > 1:
        copies.sort(key=_by_id)
    takers = [sel for sel in hits if not sel.is_copy] if len(copies) != len(hits) else []
    return copies, takers


def _by_id(sel: SelectorRuntime) -> int:
    return sel.id


_NO_HITS: tuple[list[SelectorRuntime], list[SelectorRuntime]] = ([], [])
