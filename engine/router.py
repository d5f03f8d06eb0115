"""A queue's routing table, compiled from its enabled selectors (SPEC §2 rule 1).

Theory of operation: when a queue's wiring changes, its router is rebuilt once; routing a
message then asks the router which selectors want it. MATCH conditions are answered by the
indexes of matching.py (one per field and operator), filters run only on the hits and on
filter-only selectors, and the answer is split into COPYs (in selector order) and takers
(chosen later by credit and round-robin turn). Selectors whose target queue does not exist
are left out, so they never take a message they could not pass on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.catalog import SelectorSpec
from engine.matching import new_index
from engine.message import Message

if TYPE_CHECKING:
    from engine.stores.base import SelectorState

QUEUE_ACTIONS = frozenset({"copy", "move", "bounce"})


class SelectorRuntime:
    """What routing needs of one selector, resolved once per wiring change."""

    __slots__ = (
        "action",
        "id",
        "is_copy",
        "matches",
        "replay_end",
        "replay_next",
        "spec",
        "state",
        "target",
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
        self.replay_next: int | None = None  # next history seq to replay (start_at)
        self.replay_end = 0
        self.refresh(None)

    def refresh(self, matches: Callable[[Message], bool] | None) -> None:
        self.action = self.spec.action
        self.target = self.spec.target
        self.is_copy = self.action == "copy"
        self.matches = matches


def header_text(value: object) -> str | None:
    """How a header value looks to a MATCH on that header."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Router:
    __slots__ = ("defaults", "fixed", "indexes", "overflows", "routing", "unconditional", "version")

    def __init__(self, selectors: list[SelectorRuntime], queue_exists: Callable[[str], bool],
                 version: int) -> None:
        self.version = version
        self.unconditional: list[SelectorRuntime] = []
        self.indexes: list[tuple[str, object]] = []
        self.defaults: list[SelectorRuntime] = []
        self.overflows: list[SelectorRuntime] = []
        # Rule 6: a queue with no enabled selectors besides OVERFLOW ones holds its messages.
        self.routing = False
        by_field: dict[tuple[str, str], object] = {}
        for sel in selectors:
            spec = sel.spec
            if not spec.enabled:
                continue
            if spec.when != "overflow":
                self.routing = True
            if sel.action in QUEUE_ACTIONS and not queue_exists(sel.target):
                continue
            if spec.when == "default":
                self.defaults.append(sel)
            elif spec.when == "overflow":
                self.overflows.append(sel)
            elif spec.when == "always" or spec.match is None:
                self.unconditional.append(sel)
            else:
                operator, pattern, field = spec.match
                index = by_field.get((field, operator))
                if index is None:
                    index = by_field[(field, operator)] = new_index(operator)
                    self.indexes.append((field, index))
                index.add(pattern, sel)
        # The common case (only ALWAYS selectors without filters) needs no work per message.
        self.fixed: tuple[list[SelectorRuntime], list[SelectorRuntime]] | None = None
        if not self.indexes and all(sel.matches is None for sel in self.unconditional):
            self.fixed = split(self.unconditional)

    def match(self, message: Message) -> tuple[list[SelectorRuntime], list[SelectorRuntime]]:
        """(copies in selector order, takers) whose WHEN holds for `message`."""
        if self.fixed is not None:
            return self.fixed
        hits = [sel for sel in self.unconditional if sel.matches is None or sel.matches(message)]
        for field, index in self.indexes:
            key = message.address if field == "address" else header_text(
                message.headers.get(field)
            )
            if key is None:
                continue
            for sel in index.match(key):  # type: ignore[attr-defined]
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
