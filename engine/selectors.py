"""The Selector object applications configure: WHEN + DO + credit (SPEC §1, §3).

A `Selector` is a handle (queue name + id) on the engine's wiring; every method validates
its input first and changes nothing on error. `when_*`, `do_*`, `start_at` and `set_credit`
return the selector so calls chain; `enable` and `credit` return the Deliveries they caused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.catalog import SelectorSpec

if TYPE_CHECKING:
    from engine.core import Engine
    from engine.message import Delivery


class Selector:
    __slots__ = ("_engine", "id", "queue")

    def __init__(self, engine: Engine, queue: str, selector_id: int) -> None:
        self._engine = engine
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
            and other._engine is self._engine
            and (other.queue, other.id) == (self.queue, self.id)
        )

    def __hash__(self) -> int:
        return hash((self.queue, self.id))

    # -- what it is ------------------------------------------------------------------------
    @property
    def spec(self) -> SelectorSpec:
        """A copy of the selector's wiring."""
        spec = self._engine._selector_spec(self.queue, self.id)
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
        return self._engine._selector_state(self.queue, self.id)[0]

    @property
    def outstanding(self) -> int:
        """Messages taken by this selector and not yet settled."""
        return self._engine._selector_state(self.queue, self.id)[1]

    # -- WHEN ------------------------------------------------------------------------------
    def when_match(self, operator: str, pattern: str, field: str = "address") -> Selector:
        """Match the address (or header `field`): eq, topic, prefix or regex."""
        self._engine._set_when(self.queue, self.id, "match", match=(operator, pattern, field))
        return self

    def when_filter(self, expression: str) -> Selector:
        """A JMS / SQL-92 selector expression over headers (engine/filters.py)."""
        self._engine._set_when(self.queue, self.id, "filter", expression=expression)
        return self

    def when_always(self) -> Selector:
        self._engine._set_when(self.queue, self.id, "always")
        return self

    def when_default(self) -> Selector:
        """Acts only on messages no other selector of the queue matched."""
        self._engine._set_when(self.queue, self.id, "default")
        return self

    def when_overflow(self) -> Selector:
        """Acts only on messages arriving at the queue while it is full."""
        self._engine._set_when(self.queue, self.id, "overflow")
        return self

    # -- DO --------------------------------------------------------------------------------
    def do_copy(self, queue: str) -> Selector:
        self._engine._set_action(self.queue, self.id, "copy", queue)
        return self

    def do_move(self, queue: str) -> Selector:
        self._engine._set_action(self.queue, self.id, "move", queue)
        return self

    def do_bounce(self, queue: str) -> Selector:
        self._engine._set_action(self.queue, self.id, "bounce", queue)
        return self

    def do_deliver(self, destination: str) -> Selector:
        self._engine._set_action(self.queue, self.id, "deliver", destination)
        return self

    def do_delete(self) -> Selector:
        self._engine._set_action(self.queue, self.id, "delete", None)
        return self

    # -- flow ------------------------------------------------------------------------------
    def start_at(self, start: str | int) -> Selector:
        """Where a newly enabled selector starts: "current" (live traffic only), "head"
        (the whole history first) or a seq of the history."""
        self._engine._set_start(self.queue, self.id, start)
        return self

    def set_credit(self, credit: int) -> Selector:
        """Set the remaining credit (-1 = unlimited). Routes nothing by itself; use
        `credit(n)` to top up and receive what it unblocks."""
        self._engine._set_credit(self.queue, self.id, credit)
        return self

    def credit(self, n: int) -> list[Delivery]:
        """Add `n` credits; returns the Deliveries that unblocked."""
        return self._engine._add_credit(self.queue, self.id, n)

    def enable(self, enabled: bool = True) -> list[Delivery]:
        return self._engine._enable(self.queue, self.id, enabled)

    def disable(self) -> list[Delivery]:
        return self._engine._enable(self.queue, self.id, False)

    def delete(self) -> list[Delivery]:
        return self._engine.selector_delete(self.queue, self.id)


def describe_when(spec: SelectorSpec) -> str:
    if spec.when is None:
        return "(no WHEN)"
    if spec.when != "match":
        return spec.when
    parts = []
    if spec.match is not None:
        operator, pattern, field = spec.match
        on = "" if field == "address" else f" on {field}"
        parts.append(f"{operator}{on} {pattern}")
    if spec.filter is not None:
        parts.append(f"filter {spec.filter}")
    return " and ".join(parts)


def describe_do(spec: SelectorSpec) -> str:
    if spec.action is None:
        return "(no DO)"
    return spec.action if spec.target is None else f"{spec.action} {spec.target}"
