"""The three patterns of the original design, built from queues and selectors.

* housecat — direct addressing: the router queue copies messages whose address equals the
  recipient's name into the recipient's private queue, which delivers to the recipient.
* parrot — publish/subscribe: the router queue copies messages whose address matches a topic
  pattern into the subscriber's private queue, which delivers to the subscriber.
* wolfpack — work distribution: the service queue moves messages, round-robin and credited,
  into each worker's private queue, which delivers to the worker.

Each helper is idempotent: it reuses the queues and selectors that already do the job and
creates only what is missing. Each is all or nothing: every argument is checked before
anything is made, and when a later step fails anyway what this call made is taken down.
Private queues are named `<router>:<name>` (or `<service>:<worker>`); the DELIVER
destination is the recipient's own name.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core import Engine
from engine.errors import NotFound
from engine.matching import check_pattern
from engine.message import Delivery
from engine.selectors import Selector
from engine.validation import MAX_WIRING, check_count, check_name


@dataclass(frozen=True, slots=True)
class Wiring:
    """What a pattern helper built or found: the private queue, the selectors as
    (queue, id) pairs, and any Deliveries that enabling them caused."""

    queue: str
    selectors: tuple[tuple[str, int], ...]
    deliveries: tuple[Delivery, ...] = ()
    # what this call made (the rest existed): what to take down if the caller's own record
    # of the pattern cannot be written
    made_queues: tuple[str, ...] = ()
    made_selectors: tuple[tuple[str, int], ...] = ()
    # selectors that existed and were changed to fit (a wolfpack worker's new credit)
    updated_selectors: tuple[tuple[str, int], ...] = ()


class Building:
    """What a helper made so far, to take down if a later step fails."""

    def __init__(self, eng: Engine) -> None:
        self.eng = eng
        self.queues: list[str] = []
        self.selectors: list[tuple[str, int]] = []
        self.updated: list[tuple[str, int]] = []

    def undo(self) -> None:
        for queue, number in reversed(self.selectors):
            if queue not in self.queues:
                try:
                    self.eng.selector_delete(queue, number)
                except NotFound:
                    pass
        for queue in reversed(self.queues):
            try:
                self.eng.queue_delete(queue)
            except NotFound:
                pass


def housecat(eng: Engine, recipient: str, router: str = "housecat") -> Wiring:
    check_name("recipient", recipient)
    return _fan_in(eng, router, recipient, ("eq", recipient, "address"))


def parrot(eng: Engine, subscriber: str, topic: str, router: str = "parrot") -> Wiring:
    check_name("subscriber", subscriber)
    return _fan_in(eng, router, subscriber, ("topic", topic, "address"))


def wolfpack(eng: Engine, service: str, worker: str, credit: int = 1) -> Wiring:
    check_name("service", service)
    check_name("worker", worker)
    check_count("credit", credit, minimum=-1, maximum=MAX_WIRING)
    private = check_name("worker queue", f"{service}:{worker}")
    return _build(eng, service, private, worker, ("always", None, "move", credit))


def _fan_in(eng: Engine, router: str, name: str, match: tuple[str, str, str]) -> Wiring:
    check_name("router queue", router)
    check_pattern(match[0], match[1])
    private = check_name("private queue", f"{router}:{name}")
    return _build(eng, router, private, name, ("match", match, "copy", None))


def _build(
    eng: Engine,
    shared: str,
    private: str,
    recipient: str,
    feed: tuple[str, tuple[str, str, str] | None, str, int | None],
) -> Wiring:
    """What every pattern builds: `shared` feeds `private` through one selector (`feed`:
    when, match, move or copy, credit), and `private` DELIVERs to `recipient`. All or
    nothing: what it made is undone when a step fails."""
    when, match, action, credit = feed
    building = Building(eng)
    try:
        ensure_queue(building, shared)
        ensure_queue(building, private)
        deliveries: list[Delivery] = []
        deliver = _ensure_selector(
            building, private, "always", None, "deliver", recipient, deliveries
        )
        fed = _ensure_selector(
            building, shared, when, match, action, private, deliveries, credit=credit
        )
    except BaseException:
        building.undo()
        raise
    return _wiring(private, ((private, deliver.id), (shared, fed.id)), deliveries, building)


def _wiring(
    private: str,
    selectors: tuple[tuple[str, int], ...],
    deliveries: list[Delivery],
    building: Building,
) -> Wiring:
    return Wiring(
        private,
        selectors,
        tuple(deliveries),
        tuple(building.queues),
        tuple(building.selectors),
        tuple(building.updated),
    )


def ensure_queue(building: Building, name: str) -> None:
    try:
        building.eng.queue_fetch(name)
    except NotFound:
        building.eng.queue_create(name)
        building.queues.append(name)


def _ensure_selector(
    building: Building,
    queue: str,
    when: str,
    match: tuple[str, str, str] | None,
    action: str,
    target: str,
    deliveries: list[Delivery],
    credit: int | None = None,
) -> Selector:
    eng = building.eng
    for selector in eng.selectors(queue):
        spec = selector.spec
        if (spec.when, spec.match, spec.filter, spec.action, spec.target) == (
            when,
            match,
            None,
            action,
            target,
        ):
            if credit is not None and spec.credit != credit:
                # the same worker asked for with another credit: it gets that credit
                selector.set_credit(credit)
                building.updated.append((queue, selector.id))
            if not spec.enabled:
                deliveries.extend(selector.enable())
            return selector
    selector = eng.selector_create(queue)
    building.selectors.append((queue, selector.id))
    if match is None:
        selector.when_always()
    else:
        selector.when_match(*match)
    getattr(selector, f"do_{action}")(target)
    if credit is not None:
        selector.set_credit(credit)
    deliveries.extend(selector.enable())
    return selector
