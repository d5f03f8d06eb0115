"""The three patterns of the original design, built from queues and selectors.

* housecat — direct addressing: the router queue copies messages whose address equals the
  recipient's name into the recipient's private queue, which delivers to the recipient.
* parrot — publish/subscribe: the router queue copies messages whose address matches a topic
  pattern into the subscriber's private queue, which delivers to the subscriber.
* wolfpack — work distribution: the service queue moves messages, round-robin and credited,
  into each worker's private queue, which delivers to the worker.

Each helper is idempotent: it reuses the queues and selectors that already do the job and
creates only what is missing. Private queues are named `<router>:<name>` (or
`<service>:<worker>`); the DELIVER destination is the recipient's own name.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core import Engine
from engine.errors import NotFound
from engine.message import Delivery
from engine.selectors import Selector
from engine.validation import check_count, check_name


@dataclass(frozen=True, slots=True)
class Wiring:
    """What a pattern helper built or found: the private queue, the selectors as
    (queue, id) pairs, and any Deliveries that enabling them caused."""

    queue: str
    selectors: tuple[tuple[str, int], ...]
    deliveries: tuple[Delivery, ...] = ()


def housecat(eng: Engine, recipient: str, router: str = "housecat") -> Wiring:
    check_name("recipient", recipient)
    return _fan_in(eng, router, recipient, ("eq", recipient, "address"))


def parrot(eng: Engine, subscriber: str, topic: str, router: str = "parrot") -> Wiring:
    check_name("subscriber", subscriber)
    return _fan_in(eng, router, subscriber, ("topic", topic, "address"))


def wolfpack(eng: Engine, service: str, worker: str, credit: int = 1) -> Wiring:
    check_name("service", service)
    check_name("worker", worker)
    check_count("credit", credit, minimum=-1)
    private = f"{service}:{worker}"
    _ensure_queue(eng, service)
    _ensure_queue(eng, private)
    deliveries: list[Delivery] = []
    deliver = _ensure_selector(eng, private, "always", None, "deliver", worker, deliveries)
    move = _ensure_selector(
        eng, service, "always", None, "move", private, deliveries, credit=credit
    )
    return Wiring(private, ((private, deliver.id), (service, move.id)), tuple(deliveries))


def _fan_in(eng: Engine, router: str, name: str, match: tuple[str, str, str]) -> Wiring:
    check_name("router queue", router)
    private = f"{router}:{name}"
    _ensure_queue(eng, router)
    _ensure_queue(eng, private)
    deliveries: list[Delivery] = []
    deliver = _ensure_selector(eng, private, "always", None, "deliver", name, deliveries)
    copy = _ensure_selector(eng, router, "match", match, "copy", private, deliveries)
    return Wiring(private, ((private, deliver.id), (router, copy.id)), tuple(deliveries))


def _ensure_queue(eng: Engine, name: str) -> None:
    try:
        eng.queue_fetch(name)
    except NotFound:
        eng.queue_create(name)


def _ensure_selector(
    eng: Engine,
    queue: str,
    when: str,
    match: tuple[str, str, str] | None,
    action: str,
    target: str,
    deliveries: list[Delivery],
    credit: int | None = None,
) -> Selector:
    for selector in eng.selectors(queue):
        spec = selector.spec
        if (spec.when, spec.match, spec.filter, spec.action, spec.target) == (
            when,
            match,
            None,
            action,
            target,
        ):
            if not spec.enabled:
                deliveries.extend(selector.enable())
            return selector
    selector = eng.selector_create(queue)
    if match is None:
        selector.when_always()
    else:
        selector.when_match(*match)
    getattr(selector, f"do_{action}")(target)
    if credit is not None:
        selector.set_credit(credit)
    deliveries.extend(selector.enable())
    return selector
