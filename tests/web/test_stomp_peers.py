# ruff: noqa: F811  (the fixtures of test_stomp_clients.py, imported, are parameters here)
"""Programs written for other brokers work unchanged (SPEC §9, issue 24): stomp.py clients
as a RabbitMQ or ActiveMQ tutorial writes them, against the running service over both
transports. /queue/ mailboxes made by a first SEND or SUBSCRIBE, STOMP 1.0 and 1.1
clients, /temp-queue/ request/reply, durable topic subscriptions, numbers in headers.

Each test uses names of its own; waiting is for events with generous deadlines.
"""

from __future__ import annotations

import threading
from urllib.parse import quote

import stomp

from tests.web.conftest import unique
from tests.web.test_api_queues import audit_entries
from tests.web.test_stomp_clients import (  # noqa: F401 (fixtures)
    WITHIN,
    Client,
    bodies,
    clients,
    connect,
    deliver,
    eventually,
    http,
    issue_token,
    make_queue,
    queue_names,
    transport,
    waiting,
)


def queue_answer(http, name: str) -> dict:
    answer = http.get(f"/api/queues/{quote(name, safe='')}")
    assert answer.status_code == 200, answer.text
    return answer.json()


# -- mailboxes ----------------------------------------------------------------------------------
def test_send_to_a_new_queue_makes_a_mailbox_that_a_subscriber_then_reads(service, http,
                                                                         clients):  # fmt: skip
    name = unique("mb")
    producer = clients()
    producer.send(f"/queue/{name}", "hello", receipt="r")
    producer.receipt("r")
    queue = queue_answer(http, name)
    assert queue["mailbox"] is True
    [selector] = queue["selectors"]
    assert (selector["when"], selector["action"], selector["target"]) == ("always", "deliver", name)
    assert selector["enabled"] is True and selector["credit"] == -1
    listed = {q["name"]: q for q in http.get("/api/queues").json()["queues"]}
    assert listed[name]["mailbox"] is True
    consumer = clients()
    consumer.subscribe(f"/queue/{name}")
    [frame] = consumer.take(1)
    assert frame.body == "hello" and frame.headers["destination"] == f"/queue/{name}"
    [entry] = audit_entries(service, name)
    assert entry["action"] == "queue.create" and entry["who"] == "token:tests"
    assert entry["after"]["mailbox"] is True


def test_subscribe_to_a_new_queue_makes_the_mailbox_and_a_later_send_meets_it(http, clients):
    name = unique("mb")
    consumer = clients()
    consumer.subscribe(f"/queue/{name}")
    assert queue_answer(http, name)["mailbox"] is True
    producer = clients()
    producer.send(f"/queue/{name}", "one", receipt="r")
    producer.receipt("r")
    assert bodies(consumer.take(1)) == ["one"]


def test_twenty_connections_sending_to_one_new_queue_at_once_make_one_mailbox(service, http,
                                                                            connect,
                                                                            transport):  # fmt: skip
    name = unique("mb")
    producers = [connect(transport) for _ in range(20)]
    start = threading.Barrier(len(producers))

    def send(n: int) -> None:
        start.wait(timeout=WITHIN)
        producers[n].send(f"/queue/{name}", f"m{n}", receipt=f"r{n}")

    threads = [threading.Thread(target=send, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WITHIN)
    for n, producer in enumerate(producers):
        producer.receipt(f"r{n}")
    queue = queue_answer(http, name)
    assert len(queue["selectors"]) == 1 and queue["mailbox"] is True
    assert [e["action"] for e in audit_entries(service, name)] == ["queue.create"]
    consumer = connect(transport, auto_ack=True)
    consumer.subscribe(f"/queue/{name}")
    got = consumer.take(20)
    assert sorted(bodies(got)) == sorted(f"m{n}" for n in range(20))
    receipt = "after"
    consumer.connection.send(f"/queue/{name}", "last", headers={"receipt": receipt})
    consumer.wait(lambda: len(consumer.messages) == 21, "the last message")
    assert len(consumer.messages) == 21  # every one once


def test_a_caller_without_manage_gets_todays_error_and_nothing_is_made(http, clients):
    name = unique("mb")
    token = issue_token(http, {"*": ["publish", "consume"]})
    producer = clients(token=token)
    producer.send(f"/queue/{name}", "lost", receipt="r")
    producer.wait(lambda: producer.errors, "an ERROR")
    [error] = producer.errors
    assert error.headers["message"] == "not found" and error.headers["receipt-id"] == "r"
    assert name not in queue_names(http)
    consumer = clients(token=token)
    consumer.subscribe(f"/queue/{name}")  # a destination may be fed later: no error
    assert name not in queue_names(http)


def test_an_existing_queue_is_never_rewired(http, clients):
    name = unique("mb")
    make_queue(http, name)
    producer = clients()
    producer.send(f"/queue/{name}", "waits", receipt="r")
    producer.receipt("r")
    queue = queue_answer(http, name)
    assert queue["selectors"] == [] and queue["mailbox"] is False
    assert [m["body"] for m in waiting(http, name)] == ["waits"]


def test_a_destination_that_wiring_feeds_gets_no_mailbox(http, clients):
    queue, destination = unique(), unique("d")
    deliver(http, queue, destination)
    consumer = clients()
    consumer.subscribe(f"/queue/{destination}")
    assert destination not in queue_names(http)
    producer = clients()
    producer.send(f"/queue/{queue}", "via wiring", receipt="r")
    producer.receipt("r")
    assert bodies(consumer.take(1)) == ["via wiring"]


def test_a_bad_queue_name_is_an_error_and_nothing_is_made(http, clients):
    before = queue_names(http)
    producer = clients()
    producer.send("/queue/$reserved", "x", receipt="r")
    producer.wait(lambda: producer.errors, "an ERROR")
    assert producer.errors[0].headers["message"] == "bad destination"
    assert queue_names(http) - before == set()


def test_stomp_py_connection_class_for_rabbitmq_tutorials_works_as_is(service, stomp_port):
    """The first lines of a RabbitMQ STOMP tutorial, unchanged but for the passcode."""
    name = unique("greetings")
    got = threading.Event()
    seen: list[str] = []

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame):
            seen.append(frame.body)
            got.set()

    conn = stomp.Connection([("127.0.0.1", stomp_port)])
    conn.set_listener("", Listener())
    conn.connect("guest", service.admin_token, wait=True)
    conn.subscribe(destination=f"/queue/{name}", id=1, ack="auto")
    conn.send(body="hello, world", destination=f"/queue/{name}")
    assert got.wait(WITHIN) and seen == ["hello, world"]
    conn.disconnect()
