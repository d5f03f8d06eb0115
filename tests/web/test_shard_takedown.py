"""What a connection or a pattern made on shards goes with it (SPEC §9, §10), as it does on
one store: a STOMP connection's /temp-queue/ queue living on another shard than the topic
router, an /exchange/ subscription's queue whose exchange was deleted, and the delivery
queue a pattern's DELIVER needed on the shard its destination is read on (docs/scaling.md,
Consumers), with its recorded home. A delivery queue that something else still uses
stays. What a dead STOMP process leaves, the sweep removes, on a Redis Cluster too.

The service on 2 shards over the session's redis-server, routing inline, with its STOMP
server; the topic router is named so that it lives on the other shard than the
connections' private `stomp:` queues placed by name. The sweep's on the session's Redis
Cluster, its shards on two nodes."""

from __future__ import annotations

import json
from contextlib import closing

import pytest
import redis

from engine.placement import place
from tests.web.conftest import start_service, unique, wait_for
from tests.web.stomp_clients import Client, disconnect_all, stomp_connection
from tests.web.test_shard_homes import fresh, shard_names

WITHIN = 60.0


@pytest.fixture(scope="module")
def two_shards(redis_server, tmp_path_factory):
    directory = tmp_path_factory.mktemp("takedown")
    store = f"t{unique('s').replace('-', '')}"
    shards = shard_names(store, 2)
    private = place("stomp", shards)  # where a connection's `stomp:...` temp queues go
    router = fresh("topics", lambda name: place(name, shards) != private)
    service = start_service(redis_server.url, directory, "inline", XUMP_SHARDS="2",
                            XUMP_STORE=store, XUMP_STOMP_TOPIC_ROUTER=router)  # fmt: skip
    service.shards = shards
    service.topic_router = router
    service.stomp_port = service.start_stomp()
    yield service
    service.close()


@pytest.fixture
def stomp(two_shards):
    made: list[Client] = []

    def connect() -> Client:
        client = Client(stomp_connection(two_shards, two_shards.stomp_port))
        client.connection.connect("tests", two_shards.admin_token, wait=True)
        made.append(client)
        return client

    yield connect
    disconnect_all(made)


def on(service, shard: int, prefix: str) -> str:
    """A fresh name that placement puts on shard number `shard`."""
    return fresh(prefix, lambda name: place(name, service.shards) == service.shards[shard])


def queues(http, prefix: str = "") -> dict[str, dict]:
    found = http.get("/api/queues", params={"prefix": prefix, "limit": 1000}).json()
    return {queue["name"]: queue for queue in found["queues"]}


def homes(service, names: list[str]) -> dict[str, str]:
    """The recorded homes (DestinationHome) of these destinations: destination -> store."""
    printed = service.shell(
        "import json\n"
        "from xumpweb.wiring.models import DestinationHome\n"
        f"found = DestinationHome.objects.filter(destination__in={names!r})\n"
        "print(json.dumps(dict(found.values_list('destination', 'store'))))"
    )
    return json.loads(printed.splitlines()[-1])


def gone(http, name: str) -> bool:
    return http.get(f"/api/queues/{name}").status_code == 404


def test_a_temp_queue_on_another_shard_than_the_topic_router_goes_with_its_connection(
    two_shards, stomp
):
    """SPEC §9: a /temp-queue/ queue is gone when its connection closes, wherever it lives
    (it stayed when it lived on another shard than the topic router: its removal was sent
    to the router's shard, where it is not, and nothing said so)."""
    client = stomp()
    client.subscribe("/topic/takedown.#", sid="topic")
    client.subscribe("/temp-queue/replies", sid="temp", ack="auto")
    mine = f"stomp:{client.session}:"
    with two_shards.client() as http:
        made = queues(http, mine)
        [temp] = [name for name in made if ":temp:" in name]
        [topic] = [name for name in made if ":temp:" not in name]
        router = http.get(f"/api/queues/{two_shards.topic_router}").json()
        # the case at hand: the temp queue lives on another shard than the router
        assert made[temp]["store"] != router["store"] == made[topic]["store"], (made, router)
        assert set(homes(two_shards, [temp, topic])) == {temp, topic}
        client.disconnect()
        assert wait_for(lambda: not queues(http, mine), within=WITHIN), queues(http, mine)
    assert homes(two_shards, [temp, topic]) == {}


def test_deleting_a_wolfpack_or_a_parrot_removes_the_delivery_queue_it_needed(two_shards):
    """A pattern whose private queue DELIVERs to a destination read on another shard had a
    delivery queue made there; deleting the pattern removes it and its recorded home, as
    deleting it on one store leaves nothing behind."""
    service = on(two_shards, 0, "svc")
    worker = on(two_shards, 1, "w")
    parrot = place("parrot", two_shards.shards)  # the parrot pattern's default router
    subscriber = fresh("p", lambda name: place(name, two_shards.shards) != parrot)
    with two_shards.client() as http:
        assert http.post("/api/queues", json={"name": service}).status_code == 201
        built = [
            http.post("/api/patterns", json={"kind": "wolfpack", "router": service,
                                             "name": worker}),
            http.post("/api/patterns", json={"kind": "parrot", "name": subscriber,
                                             "topic": "news.#"}),
        ]  # fmt: skip
        assert [made.status_code for made in built] == [201, 201], [m.text for m in built]
        for name in (worker, subscriber):  # the delivery queues, on their own shards
            queue = http.get(f"/api/queues/{name}").json()
            assert queue["mailbox"] is True and queue["store"] == place(name, two_shards.shards)
        assert set(homes(two_shards, [worker, subscriber])) == {worker, subscriber}
        for made in built:
            assert http.delete(f"/api/patterns/{made.json()['id']}").status_code == 200
        assert gone(http, worker) and gone(http, subscriber)
        assert gone(http, f"{service}:{worker}")
        assert http.get(f"/api/queues/{service}").status_code == 200  # the router stays
    assert homes(two_shards, [worker, subscriber]) == {}


def test_a_delivery_queue_that_something_else_uses_stays(two_shards, stomp):
    """Deleting a pattern leaves a delivery queue another pattern still delivers through,
    and a mailbox a user made: the last pattern delivering to it takes it down, a user's
    mailbox stays with its home."""
    first, second = on(two_shards, 0, "svc"), on(two_shards, 0, "svc")
    worker, users = on(two_shards, 1, "w"), on(two_shards, 1, "m")
    client = stomp()
    client.send(f"/queue/{users}", "hello", receipt="made")  # a user's mailbox
    client.receipt("made")
    with two_shards.client() as http:
        assert http.get(f"/api/queues/{users}").json()["mailbox"] is True
        for service in (first, second):
            assert http.post("/api/queues", json={"name": service}).status_code == 201
        built = {}
        for service, name in ((first, worker), (second, worker), (first, users)):
            made = http.post("/api/patterns", json={"kind": "wolfpack", "router": service,
                                                    "name": name})  # fmt: skip
            assert made.status_code == 201, made.text
            built[service, name] = made.json()["id"]
        assert http.delete(f"/api/patterns/{built[first, worker]}").status_code == 200
        assert http.get(f"/api/queues/{worker}").status_code == 200  # the second's still
        assert http.delete(f"/api/patterns/{built[first, users]}").status_code == 200
        assert http.get(f"/api/queues/{users}").json()["mailbox"] is True
        assert http.delete(f"/api/patterns/{built[second, worker]}").status_code == 200
        assert gone(http, worker)
    assert homes(two_shards, [worker, users]) == {users: two_shards.shards[1]}


def test_a_pattern_whose_private_queue_an_operator_deleted_can_be_deleted(two_shards):
    """As on one store, deleting the pattern then takes down the rest of what it built (it
    answered 404 `queue ... does not exist`, and the pattern could never be deleted)."""
    service, worker = on(two_shards, 0, "svc"), on(two_shards, 0, "w")
    with two_shards.client() as http:
        assert http.post("/api/queues", json={"name": service}).status_code == 201
        made = http.post("/api/patterns", json={"kind": "wolfpack", "router": service,
                                                "name": worker})  # fmt: skip
        assert made.status_code == 201, made.text
        assert http.delete(f"/api/queues/{service}:{worker}").status_code == 200
        deleted = http.delete(f"/api/patterns/{made.json()['id']}")
        assert deleted.status_code == 200, deleted.text
        assert http.get(f"/api/queues/{service}/selectors").json()["selectors"] == []


def spread_store(client: redis.RedisCluster) -> str:
    """A store name whose 2 shards two different nodes of the cluster serve."""
    while True:
        store = unique("t").replace("-", "")
        nodes = {client.get_node_from_key(f"xump:{{{shard}}}:inbox").port
                 for shard in shard_names(store, 2)}  # fmt: skip
        if len(nodes) == 2:
            return store


def test_the_sweep_removes_an_orphaned_private_queue_on_a_cluster(
    redis_server, redis_cluster, tmp_path
):
    """The beat's sweep (stompgate/topics.py) removes a private queue whose STOMP process
    died, on a shard another Redis Cluster node serves than shard 0 (it failed every time:
    the subscribers' presence on every shard was read through shard 0's node, which
    answers MOVED for another node's keys, so no orphan was ever removed)."""
    with closing(redis.RedisCluster.from_url(redis_cluster.node_urls[0])) as client:
        store = spread_store(client)
    shards = shard_names(store, 2)
    service = start_service(redis_cluster.node_urls[0], tmp_path, "inline", XUMP_STORE=store,
                            XUMP_SHARDS="2", XUMP_REDIS_CLUSTER="true",
                            XUMP_BROKER_URL=redis_server.url,
                            XUMP_CHANNELS_URL=redis_server.url)  # fmt: skip
    orphan = f"stomp:{unique('dead')}:1"  # a private queue whose STOMP process died
    try:
        with service.client() as http:
            made = http.post("/api/queues", json={"name": orphan, "store": shards[1]})
            assert made.status_code == 201, made.text
            swept = service.shell(
                "from xumpweb import runtime\n"
                "from xumpweb.stompgate import topics\n"
                "print([topics.sweep(runtime.service()) for _ in range(2)])"
            )
            assert swept.splitlines()[-1] == f"[[], [{orphan!r}]]"  # absent at two sweeps
            assert gone(http, orphan)
    finally:
        service.close()


def test_an_exchange_subscription_whose_exchange_was_deleted_ends_without_a_trace(
    two_shards, stomp
):
    """An /exchange/ subscription's private queue goes when it ends even after an operator
    deleted the exchange's queue, as on one store (its removal was sent to the exchange's
    shard, which no longer knows it: refused `not found`, the queue left for the sweep)."""
    exchange = on(two_shards, 1, "ex")
    with two_shards.client() as http:
        assert http.post("/api/queues", json={"name": exchange}).status_code == 201
        assert http.post(f"/api/queues/{exchange}/selectors", json={
            "when": "default", "action": "delete", "enabled": True}).status_code == 201  # fmt: skip
        client = stomp()
        client.subscribe(f"/exchange/{exchange}/orders.#", sid="ex")
        mine = f"stomp:{client.session}:"
        [private] = queues(http, mine)
        assert http.delete(f"/api/queues/{exchange}").status_code == 200
        client.unsubscribe("ex")
        assert wait_for(lambda: not queues(http, mine), within=WITHIN), queues(http, mine)
    assert homes(two_shards, [private]) == {}


def test_deleting_a_deliver_selector_or_its_queue_removes_the_delivery_queue_it_needed(
    two_shards,
):
    """A DELIVER selector made through the API to a destination read on another shard had a
    delivery queue made there: deleting the selector (or the queue that holds it) takes it
    down with its home, as deleting a pattern does (it stayed before)."""
    source = on(two_shards, 0, "src")
    first, second = on(two_shards, 1, "dest"), on(two_shards, 1, "dest")
    with two_shards.client() as http:
        assert http.post("/api/queues", json={"name": source}).status_code == 201
        made = [
            http.post(f"/api/queues/{source}/selectors", json={
                "when": "always", "action": "deliver", "target": target, "enabled": True})
            for target in (first, second)
        ]  # fmt: skip
        assert [m.status_code for m in made] == [201, 201], [m.text for m in made]
        for target in (first, second):
            assert http.get(f"/api/queues/{target}").json()["mailbox"] is True
        number = made[0].json()["id"]
        assert http.delete(f"/api/queues/{source}/selectors/{number}").status_code == 200
        assert gone(http, first) and not gone(http, second)
        assert homes(two_shards, [first, second]) == {second: two_shards.shards[1]}
        assert http.delete(f"/api/queues/{source}").status_code in (200, 204)
        assert gone(http, second)
    assert homes(two_shards, [first, second]) == {}


def test_a_bad_deliver_target_is_refused_as_a_destination_name_whatever_its_shard(two_shards):
    """A DELIVER target that is no name is refused as the selector refuses it on one store:
    "destination name ..." (one read on another shard was checked as its delivery queue's
    name first: "queue name ...", seen by the probe)."""
    sources = [on(two_shards, 0, "bad"), on(two_shards, 1, "bad")]
    with two_shards.client() as http:
        for source in sources:
            assert http.post("/api/queues", json={"name": source}).status_code == 201
        for source in sources:
            for target in ("a\tb", "\ufeffa", "a b", "x" * 201):
                answer = http.post(f"/api/queues/{source}/selectors", json={
                    "when": "always", "action": "deliver", "target": target})  # fmt: skip
                assert answer.status_code == 400, answer.text
                assert "destination name" in answer.json()["detail"], answer.text
