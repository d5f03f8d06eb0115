"""/exchange/<name>/<key> destinations, as programs written for RabbitMQ use them (SPEC §9).

On RabbitMQ an exchange routes what is published to it by its routing key to the queues
bound to it. On Xump that is a queue whose selectors route by the message's address, so:

* an exchange is a **queue of the same name**, and its routing key the message's
  **address**: `SEND /exchange/<name>/<key>` publishes to queue `<name>` with address
  `<key>` (the `publish` right on `<name>`);
* a `SUBSCRIBE /exchange/<name>/<key>` gets a private queue of the connection, as a
  /topic/ subscription does (topics.py), fed by a COPY on queue `<name>` that matches the
  address by the exchange's kind: `amq.direct` exactly (`eq`), `amq.fanout` every address,
  any other queue as a topic (`*` one word, `#` zero or more; a key without them is
  exact). The `consume` right on `<name>`.
* `amq.direct` and `amq.fanout` are made when first needed, as the topic router is (a
  DEFAULT DELETE: what no subscription takes is dropped). `amq.topic` never comes here:
  the protocol core makes it the /topic/ destination it is on RabbitMQ too.
* Any other name must be an existing queue that already routes (router/operations.py
  stomp_topic_open says why); otherwise an ERROR `not_found`, `no exchange '<name>'...`, as
  RabbitMQ words it. RabbitMQ's other built-in exchanges (`amq.headers`, `amq.match`) are
  not supported: a `selector` header does a headers exchange's work.
"""

from __future__ import annotations

from xumpweb.stompgate import mailboxes

# RabbitMQ's built-in exchanges Xump makes when first used, and how each matches
BUILT_IN: dict[str, str | None] = {"amq.direct": "eq", "amq.fanout": None}
NOT_FOUND = "not_found"  # RabbitMQ's ERROR message, which its programs compare


def operator(exchange: str) -> str | None:
    """How a binding key matches an address on this exchange (None: every address)."""
    return BUILT_IN.get(exchange, "topic")


def missing(exchange: str, names: frozenset[str]) -> str | None:
    """Why `exchange` cannot be used (an ERROR body), or None when it can. `names`: the
    queues that exist."""
    if exchange in BUILT_IN:
        return None
    if exchange.startswith("amq."):
        return (
            f"no exchange {exchange!r}: Xump has amq.topic, amq.direct and amq.fanout "
            "(for a headers exchange, SUBSCRIBE with a `selector` header)"
        )
    if exchange not in names or mailboxes.is_private(exchange):
        return (
            f"no exchange {exchange!r}: on Xump an exchange is a queue of that name (make "
            "it and its selectors first), or amq.topic, amq.direct, amq.fanout"
        )
    return None
