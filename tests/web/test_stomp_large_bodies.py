"""Bodies past the engine's own default limit (8 MiB), on a service whose XUMP_MAX_BODY
allows them: what a door takes (a SEND's RECEIPT, as a 202) the router routes, over both
STOMP transports. RabbitMQ's STOMP tests send 16 MiB bodies to a broker configured for them
(bench/peer_suites.py raises XUMP_MAX_BODY as their harness raises RabbitMQ's frame limit);
before, the router refused such a body after its RECEIPT, and the message was lost.
"""

from __future__ import annotations

import pytest

from tests.web.conftest import start_service, unique
from tests.web.test_subscribe import Xump

LIMIT = 10 * 1024 * 1024  # XUMP_MAX_BODY of this module's service
ENGINE_DEFAULT = 8 * 1024 * 1024  # engine.validation.DEFAULT_MAX_BODY


@pytest.fixture(scope="module")
def service(redis_server, tmp_path_factory):
    """The service (routing inline) with XUMP_MAX_BODY above the engine's default limit."""
    running = start_service(redis_server.url, tmp_path_factory.mktemp("large"), "inline",
                            XUMP_MAX_BODY=str(LIMIT))  # fmt: skip
    yield running
    running.close()


@pytest.fixture(scope="module")
def stomp_port(service):
    return service.start_stomp()


def test_a_body_past_the_engines_default_limit_reaches_the_subscriber(clients):
    name = unique("big")
    consumer = clients()
    consumer.subscribe(f"/queue/{name}")  # a mailbox
    body = "x" * (ENGINE_DEFAULT + 1024)
    producer = clients()
    producer.send(f"/queue/{name}", body, receipt="big")
    producer.receipt("big")
    [message] = consumer.take(1)
    assert message.body == body


def test_a_body_past_xump_max_body_is_refused_and_nothing_is_published(clients, service):
    name = unique("big")
    producer = clients()
    producer.send(f"/queue/{name}", "first", receipt="first")  # makes the mailbox
    producer.receipt("first")
    producer.send(f"/queue/{name}", "x" * (LIMIT + 1), receipt="over")
    producer.wait(lambda: bool(producer.errors), "the ERROR")
    [error] = producer.errors
    assert error.headers["message"] == "message too large"
    assert error.headers["receipt-id"] == "over"
    assert Xump(service).stats(name)["published"] == 1
