"""Programs written for other brokers work unchanged (SPEC §9, issue 24): stomp.py clients
as a RabbitMQ or ActiveMQ tutorial writes them, against the running service over both
transports. /queue/ mailboxes made by a first SEND or SUBSCRIBE, STOMP 1.0 and 1.1
clients, /temp-queue/ request/reply, durable topic subscriptions, numbers in headers.

Each test uses names of its own; waiting is for events with generous deadlines.
"""

from __future__ import annotations

import contextlib
import threading
from urllib.parse import quote

import pytest
import stomp

from tests.web.conftest import eventually, service_with_own_redis, unique
from tests.web.stomp_clients import WITHIN, Client, made_since, stomp_connection
from tests.web.test_api_queues import audit_entries
from tests.web.test_stomp_clients import (
    bodies,
    delivering,
    issue_token,
    make_queue,
    queue_names,
    waiting,
)
from tests.web.test_stomp_protocol import frame, tcp, websocket
from tests.web.test_subscribe import subscribe


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
    found = http.get("/api/queues", params={"prefix": name}).json()["queues"]
    listed = {q["name"]: q for q in found}
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
    queue, destination = delivering(http)
    consumer = clients()
    consumer.subscribe(f"/queue/{destination}")
    assert destination not in queue_names(http)
    producer = clients()
    producer.send(f"/queue/{queue}", "via wiring", receipt="r")
    producer.receipt("r")
    assert bodies(consumer.take(1)) == ["via wiring"]


def test_only_stomp_makes_mailboxes_not_the_json_websocket_nor_the_http_publish(service, http):
    """A /ws/subscribe/ to a destination nothing feeds waits for wiring, and an HTTP
    publish to a missing queue is a 404, even for a caller with manage: nothing is made
    (docs/websocket.md, docs/api.md say why)."""
    name = unique("box")
    before = queue_names(http)
    with subscribe(service, name):  # subscribed: waits for wiring
        answer = http.post(f"/api/queues/{name}/publish", json={"body": "hello"})
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"] == "not_found"
    assert made_since(http, before, [], name) == set()


def test_a_bad_queue_name_is_an_error_and_nothing_is_made(http, clients):
    before = queue_names(http)
    producer = clients()
    producer.send("/queue/$reserved", "x", receipt="r")
    producer.wait(lambda: producer.errors, "an ERROR")
    assert producer.errors[0].headers["message"] == "Invalid destination"
    assert made_since(http, before, [producer], "reserved") == set()


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


# -- STOMP 1.0 and 1.1 --------------------------------------------------------------------------
def connect_version(service, stomp_port, version: str) -> Client:
    """A stomp.py client of that version over TCP."""
    client = Client(stomp_connection(service, stomp_port, "tcp", version))
    client.connection.connect("tests", service.admin_token, wait=True)
    return client


def test_a_stomp_10_client_publishes_subscribes_and_acks_by_message_id(service, stomp_port, http):
    queue = unique("v10")
    client = connect_version(service, stomp_port, "1.0")
    client.connection.subscribe(f"/queue/{queue}", ack="client", headers={"receipt": "s"})
    client.receipt("s")
    client.connection.send(f"/queue/{queue}", "old \\ school", headers={"receipt": "r"})
    client.receipt("r")
    [frame] = client.take(1)
    assert frame.body == "old \\ school"
    client.connection.ack(frame.headers["message-id"], receipt="a")
    client.receipt("a")
    eventually(lambda: queue_answer(http, queue)["stats"]["confirmed"] == 1, "the ack")
    client.connection.disconnect()


def test_a_stomp_10_client_gets_an_error_for_nack_and_its_message_comes_back(service,
                                                                           stomp_port):  # fmt: skip
    queue = unique("v10")
    client = connect_version(service, stomp_port, "1.0")
    client.connection.subscribe(f"/queue/{queue}", id="a", ack="client", headers={"receipt": "s"})
    client.receipt("s")
    client.connection.send(f"/queue/{queue}", "once", headers={"receipt": "r"})
    client.receipt("r")
    [frame] = client.take(1)
    client.connection.send_frame("NACK", {"message-id": frame.headers["message-id"]})
    client.wait(lambda: client.errors, "an ERROR")
    assert client.errors[0].headers["message"] == "unexpected NACK"
    again = connect_version(service, stomp_port, "1.1")
    again.connection.subscribe(f"/queue/{queue}", id="b", ack="auto")
    [back] = again.take(1)
    assert back.body == "once" and back.headers["redelivered"] == "true"
    again.connection.disconnect()


def test_stomp_10_over_websocket(service):
    queue = unique("ws")
    with websocket(service, "") as client:
        client.send(f"CONNECT\nlogin:tests\npasscode:{service.admin_token}\n\n\x00".encode())
        assert client.expect("CONNECTED").headers["version"] == "1.0"
        client.send(f"SUBSCRIBE\ndestination:/queue/{queue}\nreceipt:s\n\n\x00".encode())
        assert client.expect("RECEIPT").headers["receipt-id"] == "s"
        client.send(f"SEND\ndestination:/queue/{queue}\n\nover 1.0\x00".encode())
        message = client.expect("MESSAGE")
        assert message.body == b"over 1.0"
        assert message.headers["subscription"] == f"/queue/{queue}"


# -- /temp-queue/ request/reply -----------------------------------------------------------------
def test_request_reply_through_a_temp_queue(clients):
    service_queue = unique("rpc")
    server, caller = clients(), clients()
    server.subscribe(f"/queue/{service_queue}")  # a mailbox
    caller.send(f"/queue/{service_queue}", "2+2?", receipt="r",
                **{"reply-to": "/temp-queue/answers"})  # fmt: skip
    caller.receipt("r")
    [request] = server.take(1)
    reply_to = request.headers["reply-to"]
    assert reply_to.startswith("/queue/stomp:")
    server.send(reply_to, "4", receipt="back")
    server.receipt("back")
    server.ack(request)
    [answer] = caller.take(1)  # no SUBSCRIBE: the reply reaches the connection
    assert answer.body == "4" and answer.headers["destination"] == "/temp-queue/answers"


def test_request_reply_through_a_topic_as_a_rabbitmq_program_writes_it(clients):
    """reply-to:/topic/<key> (or any text RabbitMQ passes through) reaches the replier as it
    was sent, and its SEND there reaches the caller's topic subscription. It was an ERROR
    (only /queue/ and /temp-queue/ were taken), ending the program at its first request."""
    service_queue, key = unique("rpc"), unique("answers")
    server, caller = clients(), clients()
    server.subscribe(f"/queue/{service_queue}")
    caller.subscribe(f"/topic/{key}", sid="replies")
    caller.send(f"/queue/{service_queue}", "2+2?", receipt="r", **{"reply-to": f"/topic/{key}"})
    caller.receipt("r")
    [request] = server.take(1)
    assert request.headers["reply-to"] == f"/topic/{key}"
    server.send(request.headers["reply-to"], "4", receipt="back")
    server.receipt("back")
    server.ack(request)
    [answer] = caller.take(1)
    assert answer.body == "4" and answer.headers["subscription"] == "replies"


def test_a_subscribe_to_a_temp_queue_receives_its_replies(clients):
    service_queue = unique("rpc")
    server, caller = clients(auto_ack=True), clients()
    server.subscribe(f"/queue/{service_queue}")
    caller.subscribe("/temp-queue/mine", sid="replies", ack="client-individual")
    caller.send(f"/queue/{service_queue}", "ping", **{"reply-to": "/temp-queue/mine"})
    [request] = server.take(1)
    server.send(request.headers["reply-to"], "pong")
    [answer] = caller.take(1)
    assert answer.body == "pong" and answer.headers["subscription"] == "replies"
    caller.ack(answer, receipt="a")


def test_a_subscribe_after_the_first_request_gets_every_reply(clients):
    """A program that sends its first request with reply-to:/temp-queue/<name> and only
    then SUBSCRIBEs to it: every reply comes to its subscription (they were shared with the
    reader the reply-to had made, whose MESSAGEs name a subscription the program never
    made: stompjs drops them, already acked)."""
    service_queue = unique("rpc")
    server, caller = clients(auto_ack=True), clients()
    server.subscribe(f"/queue/{service_queue}")
    caller.send(f"/queue/{service_queue}", "first", receipt="r",
                **{"reply-to": "/temp-queue/late"})  # fmt: skip
    caller.receipt("r")
    caller.subscribe("/temp-queue/late", sid="replies", ack="client-individual")
    for n in range(5):
        caller.send(f"/queue/{service_queue}", f"q{n}", **{"reply-to": "/temp-queue/late"})
    requests = server.take(6)
    for request in requests:
        server.send(request.headers["reply-to"], f"re {request.body}")
    answers = caller.take(6)
    assert sorted(a.body for a in answers) == sorted(f"re {r.body}" for r in requests)
    assert {a.headers["subscription"] for a in answers} == {"replies"}


def test_a_temp_queue_goes_with_its_connection_and_nobody_else_reads_it(http, clients):
    service_queue = unique("rpc")
    server, caller = clients(), clients()
    server.subscribe(f"/queue/{service_queue}")
    caller.send(f"/queue/{service_queue}", "q", receipt="r", **{"reply-to": "/temp-queue/t"})
    caller.receipt("r")
    [request] = server.take(1)
    private = request.headers["reply-to"][len("/queue/") :]
    assert private in queue_names(http)
    thief = clients()
    thief.connection.subscribe(f"/queue/{private}", "x", headers={"receipt": "s"})
    thief.wait(lambda: thief.errors, "an ERROR")
    assert "private" in thief.errors[0].body
    caller.disconnect()
    eventually(lambda: private not in queue_names(http), "the temp queue to go")
    server.send(f"/queue/{private}", "too late", receipt="late")
    server.wait(lambda: server.errors, "an ERROR")
    assert server.errors[0].headers["message"] == "not found"


def test_temp_queue_naming_another_connections_queue_is_an_error(http, clients):
    before = queue_names(http)
    client = clients()
    client.connection.subscribe("/temp-queue/stomp:abc:temp:x", "x", headers={"receipt": "s"})
    client.wait(lambda: client.errors, "an ERROR")
    assert client.errors[0].headers["message"] == "Invalid destination"
    assert made_since(http, before, [client], "abc") == set()


# -- durable topic subscriptions ----------------------------------------------------------------
RABBIT = {"durable": "true", "auto-delete": "false"}


def test_a_durable_subscription_keeps_what_is_published_while_away_rabbitmq_dialect(
    http, connect, durable_client, transport
):
    topic, client_id = unique("news"), unique("app")
    first = durable_client(transport, client_id)
    first.subscribe(f"/topic/{topic}.*", sid="news", ack="client-individual", **RABBIT)
    first.disconnect()
    producer = connect(transport)
    for n in range(3):
        producer.send(f"/topic/{topic}.eu", f"away {n}", receipt=f"r{n}")
        producer.receipt(f"r{n}")
    back = eventually(
        lambda: durable_client(transport, client_id, auto_ack=True), "the client-id to be free"
    )
    back.subscribe(f"/topic/{topic}.*", sid="news", ack="client-individual", **RABBIT)
    got = back.take(3)
    assert bodies(got) == ["away 0", "away 1", "away 2"]  # per-queue FIFO
    assert [f.headers["redelivered"] for f in got] == ["false"] * 3
    durable = [n for n in queue_names(http) if n.startswith("stomp-durable:") and client_id in n]
    assert len(durable) == 1
    receipt = "gone"
    back.connection.unsubscribe("news", headers={"durable": "true", "receipt": receipt})
    back.receipt(receipt)
    assert durable[0] not in queue_names(http)


def test_a_durable_subscription_is_its_logins_alone(http, connect, durable_client, transport):
    """Another login that takes the same client-id while the subscriber is away could
    remove the durable subscription (UNSUBSCRIBE durable) or read what it kept (the same
    subscription id): its queue was named by the client-id alone."""
    topic, client_id = unique("news"), unique("app")
    first = durable_client(transport, client_id)
    first.subscribe(f"/topic/{topic}", sid="news", ack="client-individual", **RABBIT)
    first.disconnect()
    producer = connect(transport)
    producer.send(f"/topic/{topic}", "kept", receipt="r")
    producer.receipt("r")
    (queue,) = [n for n in queue_names(http) if n.startswith("stomp-durable:") and client_id in n]
    stranger = issue_token(http, {"*": ["consume", "publish"]})
    other = eventually(lambda: durable_client(transport, client_id, token=stranger),
                       "the client-id to be free")  # fmt: skip
    other.connection.unsubscribe("news", headers={"durable": "true", "receipt": "gone"})
    other.receipt("gone")
    other.subscribe(f"/topic/{topic}", sid="news", ack="client-individual", **RABBIT)
    other.disconnect()
    assert queue in queue_names(http)
    back = eventually(lambda: durable_client(transport, client_id, auto_ack=True),
                      "the client-id to be free")  # fmt: skip
    back.subscribe(f"/topic/{topic}", sid="news", ack="client-individual", **RABBIT)
    assert bodies(back.take(1)) == ["kept"]


def test_a_durable_subscription_activemq_dialect(http, connect, durable_client, transport):
    topic, client_id = unique("news"), unique("app")
    named = {"activemq.subscriptionName": "mine"}
    first = durable_client(transport, client_id)
    first.subscribe(f"/topic/{topic}", sid="1", **named)
    first.drop()  # gone without a word
    producer = connect(transport)
    producer.send(f"/topic/{topic}", "while away", receipt="r")
    producer.receipt("r")
    back = eventually(lambda: durable_client(transport, client_id), "the client-id to be free")
    back.subscribe(f"/topic/{topic}", sid="2", ack="auto", **named)
    assert bodies(back.take(1)) == ["while away"]
    back.connection.unsubscribe("2", headers={**named, "receipt": "u"})
    back.receipt("u")
    assert not [n for n in queue_names(http) if client_id in n]


def test_what_is_published_as_a_durable_subscriber_leaves_waits_in_order_never_delivered(
    connect, durable_client, transport
):
    """The subscription's last take, waiting for the outbox as it ends, may take what
    arrives then: that goes back to the head of the outbox as it was, so the subscriber's
    return receives it first, in order, and not as a redelivery (it reached nobody).
    Rejected with requeue instead, it came back redelivered, behind what had arrived
    meanwhile: out of order. Each round publishes right as the subscriber leaves."""
    producer = connect(transport)
    for lap in range(4):
        topic, client_id = unique("news"), unique("app")
        first = durable_client(transport, client_id)
        first.subscribe(f"/topic/{topic}", sid="news", ack="client-individual", **RABBIT)
        first.disconnect()
        for n in range(3):
            producer.send(f"/topic/{topic}", f"away {n}", receipt=f"r{lap}-{n}")
        producer.receipt(f"r{lap}-2")
        back = eventually(
            lambda id=client_id: durable_client(transport, id, auto_ack=True), "the client-id"
        )
        back.subscribe(f"/topic/{topic}", sid="news", ack="client-individual", **RABBIT)
        got = back.take(3)
        assert bodies(got) == ["away 0", "away 1", "away 2"]
        assert [f.headers["redelivered"] for f in got] == ["false"] * 3
        back.connection.unsubscribe("news", headers={"durable": "true", "receipt": "u"})
        back.receipt("u")
        back.disconnect()


def feeding(http, queue: str) -> list[dict]:
    """The topic router's selectors that copy into `queue`."""
    answer = http.get("/api/queues/parrot/selectors")
    assert answer.status_code == 200, answer.text
    return [s for s in answer.json()["selectors"] if s["target"] == queue]


def test_deleting_a_durable_subscriptions_queue_removes_what_fed_it(http, durable_client,
                                                                    connect):  # fmt: skip
    """An operator removes a durable subscription through the API (or the console): its
    queue goes with the router's COPY feeding it, so the subscriber's next SUBSCRIBE, with
    another pattern, receives only what that pattern asks for."""
    topic, client_id = unique("news"), unique("app")
    first = durable_client("tcp", client_id)
    first.subscribe(f"/topic/{topic}.*", sid="news", **RABBIT)
    first.disconnect()
    (queue,) = [n for n in queue_names(http) if n.startswith("stomp-durable:") and client_id in n]
    assert [s["action"] for s in feeding(http, queue)] == ["copy"]
    answer = http.delete(f"/api/queues/{quote(queue, safe='')}")
    assert answer.status_code == 200, answer.text
    assert feeding(http, queue) == []
    back = eventually(lambda: durable_client("tcp", client_id), "the client-id to be free")
    back.subscribe(f"/topic/{topic}.us", sid="news", ack="auto", **RABBIT)
    producer = connect("tcp")
    producer.send(f"/topic/{topic}.eu", "for the old pattern", receipt="r0")
    producer.send(f"/topic/{topic}.us", "for the new one", receipt="r1")
    producer.receipt("r1")
    assert bodies(back.take(1)) == ["for the new one"]  # routed after the other, in order
    back.connection.unsubscribe("news", headers={"durable": "true", "receipt": "u"})
    back.receipt("u")
    assert feeding(http, queue) == []


def test_a_durable_subscription_asked_for_with_another_pattern_is_made_anew(
    http, connect, durable_client
):
    """The same subscription name with another topic pattern (RabbitMQ's test_separate_ids
    met it with one id on two destinations): as JMS and ActiveMQ, the old one goes, and
    the new one receives what its pattern matches; kept, it went on receiving the old
    pattern's messages and none of the new one's."""
    topic, client_id = unique("news"), unique("app")
    first = durable_client("tcp", client_id)
    first.subscribe(f"/topic/{topic}.eu", sid="news", **RABBIT)
    first.disconnect()
    producer = connect("tcp")
    back = eventually(lambda: durable_client("tcp", client_id), "the client-id to be free")
    back.subscribe(f"/topic/{topic}.us", sid="news", ack="auto", **RABBIT)
    producer.send(f"/topic/{topic}.eu", "for the old pattern", receipt="r1")
    producer.send(f"/topic/{topic}.us", "for the new one", receipt="r2")
    producer.receipt("r2")
    assert bodies(back.take(1)) == ["for the new one"]
    (queue,) = [n for n in queue_names(http) if client_id in n]
    assert [s["match"]["pattern"] for s in feeding(http, queue)] == [f"{topic}.us"]
    back.connection.unsubscribe("news", headers={"durable": "true", "receipt": "u"})
    back.receipt("u")


def test_a_topic_subscription_receives_nothing_sent_before_it_on_its_connection(
    stomp_port, service
):
    """Frames of one connection act in order: SENDs pipelined before a SUBSCRIBE to a
    topic they match are not its messages (RabbitMQ's durable subscription test met one:
    the SUBSCRIBE's wiring, a router call, overtook the SEND on its way to the inbox)."""
    topic = unique("news")
    with tcp(stomp_port, service.admin_token) as client:
        before = b"".join(
            frame("SEND", f"before {n}".encode(), destination=f"/topic/{topic}") for n in range(20)
        )
        client.send(before + frame("SUBSCRIBE", id="s", destination=f"/topic/{topic}",
                                   receipt="sub"))  # fmt: skip
        assert client.expect("RECEIPT").headers["receipt-id"] == "sub"
        client.send(frame("SEND", b"after", destination=f"/topic/{topic}", receipt="p"))
        assert client.expect("RECEIPT").headers["receipt-id"] == "p"
        assert [m.body for m in client.messages(1)] == [b"after"]


def test_a_second_live_connection_with_the_same_client_id_is_refused(durable_client, transport):
    client_id = unique("app")
    assert durable_client(transport, client_id) is not None
    other = "websocket" if transport == "tcp" else "tcp"
    assert durable_client(other, client_id) is None  # refused: ERROR client-id in use


def test_durable_without_an_id_and_a_bad_client_id_are_errors(http, service, stomp_port):
    before = queue_names(http)
    client = connect_version(service, stomp_port, "1.0")
    client.connection.send_frame("SUBSCRIBE", {"destination": "/topic/x", "durable": "true"})
    client.wait(lambda: client.errors, "an ERROR")
    assert client.errors[0].headers["message"] == "Missing Header"
    bad = stomp.Connection12([("127.0.0.1", stomp_port)])
    listener = Client(bad)
    bad.connect("tests", service.admin_token, headers={"client-id": "a\tb"}, wait=False)
    listener.wait(lambda: listener.errors, "an ERROR")
    assert listener.errors[0].headers["message"] == "Invalid header"
    assert made_since(http, before, [client, listener], "a\tb") == set()


def test_a_durable_subscription_survives_a_restart_of_the_stomp_server(service, http):
    """What a killed server's connection held unacknowledged comes back after the delivery
    timeout (docs/stomp.md); here the subscriber has taken (ack:auto) what came before."""
    topic, client_id = unique("news"), unique("app")
    port = service.start_stomp("stomp-durable")
    try:
        first = _stomp_client(service, port, client_id)
        first.subscribe(f"/topic/{topic}", sid="d", ack="auto", **RABBIT)
        first.send(f"/topic/{topic}", "before", receipt="r0")
        assert bodies(first.take(1)) == ["before"]
        service.stop("stomp-durable", kill=True)
        first.wait(lambda: first.disconnected, "the end of the connection")
        producer = _stomp_client(service, service.start_stomp("stomp-durable", port=port), None)
        for n in range(3):
            producer.send(f"/topic/{topic}", f"during {n}", receipt=f"r{n}")
            producer.receipt(f"r{n}")
        back = eventually(
            lambda: _stomp_client(service, port, client_id, quiet=True), "the client-id"
        )
        back.subscribe(f"/topic/{topic}", sid="d", **RABBIT)
        assert bodies(back.take(3)) == ["during 0", "during 1", "during 2"]
        back.connection.unsubscribe("d", headers={"durable": "true", "receipt": "u"})
        back.receipt("u")
        assert not [n for n in queue_names(http) if client_id in n]
        back.connection.disconnect()
        producer.connection.disconnect()
    finally:
        service.stop("stomp-durable")


@pytest.fixture
def own_redis(tmp_path):
    """A service with a redis-server of its own, which the test may kill."""
    yield from service_with_own_redis(tmp_path)


def test_a_durable_subscription_survives_a_restart_of_redis(own_redis):
    """Redis killed (kill -9) and started again on its AOF (appendfsync always): the
    durable subscription's queue and what it held while the subscriber was away come
    back, in order; nothing whose receipt came is lost, and it goes on receiving."""
    service, redis_server = own_redis
    topic, client_id = unique("news"), unique("app")
    port = service.start_stomp("stomp-redis")
    try:
        first = _stomp_client(service, port, client_id)
        first.subscribe(f"/topic/{topic}", sid="d", **RABBIT)
        first.disconnect()
        producer = _stomp_client(service, port, None)
        for n in range(3):
            producer.send(f"/topic/{topic}", f"away {n}", receipt=f"r{n}")
        producer.receipt("r2")  # durable: in the AOF
        producer.connection.disconnect()
        with service.client() as http:
            (queue,) = [n for n in queue_names(http) if client_id in n]
            redis_server.kill()
            redis_server.start()  # the same port and AOF file
            eventually(
                lambda: http.get(f"/api/queues/{quote(queue, safe='')}").status_code == 200,
                "the router to answer again", within=60,
            )  # fmt: skip
        back = eventually(lambda: _stomp_client(service, port, client_id, quiet=True),
                          "the client-id", within=60)  # fmt: skip
        back.subscribe(f"/topic/{topic}", sid="d", **RABBIT)

        def publish_after() -> bool:
            """A publisher as programs write one: an ERROR (the first use of a connection
            to the Redis that was killed may meet `store unavailable`) means not stored,
            so it connects again and sends again."""
            producer = _stomp_client(service, port, None)
            producer.send(f"/topic/{topic}", "after", receipt="r3")
            producer.wait(lambda: "r3" in producer.receipts or producer.errors, "an answer")
            # after an ERROR the server closes the connection: it may be closed between the
            # look and the DISCONNECT (stomp.py then fails on the closed socket)
            with contextlib.suppress(OSError):
                if producer.connection.is_connected():
                    producer.connection.disconnect()
            return "r3" in producer.receipts

        eventually(publish_after, "a publish after the restart to be stored", within=60)
        got = back.take(4)
        assert bodies(got) == ["away 0", "away 1", "away 2", "after"]
        assert [f.headers["redelivered"] for f in got] == ["false"] * 4
        for frame in got:
            back.ack(frame)
        back.connection.unsubscribe("d", headers={"durable": "true", "receipt": "u"})
        back.receipt("u")
        back.connection.disconnect()
    finally:
        service.stop("stomp-redis")


def _stomp_client(service, port: int, client_id: str | None, quiet: bool = False):
    connection = stomp.Connection12([("127.0.0.1", port)])
    client = Client(connection)
    headers = {"client-id": client_id} if client_id else {}
    try:
        connection.connect("tests", service.admin_token, headers=headers, wait=True)
    except Exception:
        if quiet:
            return None
        raise
    if client.errors:
        return None
    return client


# -- numbers in headers -------------------------------------------------------------------------
def test_a_selector_compares_a_stomp_header_written_as_a_number_as_a_number(http, clients):
    queue, destination = delivering(http)
    big, producer = clients(auto_ack=True), clients()
    big.subscribe(f"/queue/{destination}", selector="amount > 500 AND price < 20.5")
    for n, (amount, price) in enumerate(
        [("700", "12.5"), ("90", "1"), ("0700", "1"), ("501", "20")]
    ):
        producer.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}", amount=amount, price=price)
    producer.receipt("r3")
    found = big.take(2)
    assert bodies(found) == ["m0", "m3"]
    assert [f.headers["amount"] for f in found] == ["700", "501"]  # the text sent
    rest = clients()
    rest.subscribe(f"/queue/{destination}")
    assert sorted(f.headers["amount"] for f in rest.take(2)) == ["0700", "90"]


# -- one connection subscribing and sending, receipts interleaved (RabbitMQ's destinations) ----
@pytest.mark.parametrize("receipts", [("a", None, "b"), (None, "a", None)])
def test_a_connection_reads_its_own_sends_with_and_without_receipts_interleaved(clients, receipts):
    """RabbitMQ's test_interleaved_receipt_no_receipt and its inverse: one connection
    subscribes to a new /queue/ with ack:auto and SENDs three there, some asking for a
    receipt: all three come back, every receipt comes."""
    client = clients()
    queue = unique("ir")
    client.subscribe(f"/queue/{queue}", ack="auto")
    for body, receipt in zip(("first", "second", "third"), receipts, strict=True):
        client.send(f"/queue/{queue}", body, receipt=receipt)
    client.wait(lambda: len(client.messages) == 3, "the three messages")
    for receipt in receipts:
        if receipt is not None:
            client.receipt(receipt)
    assert bodies(client.messages) == ["first", "second", "third"]


def test_a_connection_reads_its_own_transaction_with_receipts_interleaved(clients):
    """RabbitMQ's test_interleaved_receipt_no_receipt_tx: the same inside a transaction."""
    client = clients()
    queue = unique("ir")
    client.subscribe(f"/queue/{queue}", ack="auto")
    client.connection.begin(transaction="tx.ir")
    for body, receipt in (("first", "a"), ("second", None), ("third", "b")):
        client.send(f"/queue/{queue}", body, receipt=receipt, transaction="tx.ir")
    client.connection.commit(transaction="tx.ir")
    client.wait(lambda: len(client.messages) == 3, "the three messages")
    client.receipt("a")
    client.receipt("b")
    assert bodies(client.messages) == ["first", "second", "third"]


@pytest.mark.parametrize("leaves", ["unsubscribe", "disconnect", "drop"])
def test_what_is_sent_right_after_an_ack_auto_subscriber_leaves_reaches_the_next(clients, leaves):
    """An ack:auto subscriber waiting for its destination's next message leaves
    (UNSUBSCRIBE, then DISCONNECT); what is sent right after must reach the next
    subscriber, not the one that left (RabbitMQ's destinations tests meet this: each test
    subscribes to the same /queue/ir on a connection of its own)."""
    queue = unique("ir")
    leaving = clients()
    leaving.subscribe(f"/queue/{queue}", ack="auto")  # waits in its claim: nothing there
    if leaves == "unsubscribe":
        leaving.unsubscribe()
    if leaves == "drop":
        leaving.drop()
    else:
        leaving.disconnect()
    staying = clients()
    staying.subscribe(f"/queue/{queue}", ack="auto")
    for n in range(3):
        staying.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}")
    staying.wait(lambda: len(staying.messages) == 3, "the three messages", within=30)
    assert bodies(staying.messages) == ["m0", "m1", "m2"]
    assert leaving.messages == []
