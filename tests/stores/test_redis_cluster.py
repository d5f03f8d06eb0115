"""The Redis store on a real Redis Cluster (tests/conftest.py: three nodes, no replicas, AOF
with fsync on every write): shards are stores whose hash tags land on different nodes."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import closing, contextmanager

import pytest
import redis
from redis.crc import key_slot

from engine import Engine, Message
from engine.catalog import MemoryCatalog
from engine.errors import StoreError
from engine.relay import RelayClient, RelayRouter
from engine.stores.redis_connect import connect, node_client
from tests.conftest import start_cluster
from tests.engine.conftest import drop_redis_keys


def test_the_cluster_fixture_has_three_primaries_covering_every_slot(redis_cluster) -> None:
    client = redis.RedisCluster.from_url(redis_cluster.node_urls[0])
    try:
        primaries = client.get_primaries()
        assert len(primaries) == 3
        assert all(node.port < 55536 and node.port != 6379 for node in primaries)
        info = client.cluster_info()
        assert (info["cluster_state"], int(info["cluster_slots_ok"])) == ("ok", 16384)
    finally:
        client.close()


def store_names(cluster, nodes: list[int]) -> list[str]:
    """New store names whose hash tags land on the given nodes (indexes of the sorted
    primaries)."""
    client, _ = connect(cluster.url)
    primaries = sorted(node.name for node in client.get_primaries())
    names = []
    for wanted in nodes:
        while True:
            name = f"t{uuid.uuid4().hex[:12]}"
            if client.get_node_from_key(f"xump:{{{name}}}:").name == primaries[wanted]:
                names.append(name)
                break
    client.close()
    return names


@pytest.fixture
def shards(redis_cluster):
    """Three store names, one on each node of the cluster; their keys deleted after."""
    names = store_names(redis_cluster, [0, 1, 2])
    yield names
    for name in names:
        drop_redis_keys(redis_cluster.url, name)


def test_queues_on_shards_on_three_nodes_copy_and_move_between_them_and_survive_a_restart(
    redis_cluster, shards
) -> None:
    engine = Engine()
    for name in shards:
        engine.store_create("redis", name, url=redis_cluster.url)
    engine.set_shards(shards)
    engine.queue_create("in", store=shards[0], history=10)
    engine.queue_create("audit", store=shards[1])
    engine.queue_create("work", store=shards[2])
    engine.selector_create("in").when_always().do_copy("audit").enable()
    engine.selector_create("in").when_always().do_move("work").enable()
    engine.publish_many("in", [Message(body=str(n).encode()) for n in range(100)])

    again = Engine(catalog=engine.catalog)  # as a new process builds it
    expected = [str(n).encode() for n in range(100)]
    assert [m.body for m in again.peek("audit", 1000)] == expected
    assert [m.body for m in again.peek("work", 1000)] == expected
    assert again.queue_fetch("in").outstanding == 100  # the moves, until settled downstream
    clients = {node_client(connect(redis_cluster.url)[0], f"xump:{{{n}}}:").connection_pool
               .connection_kwargs["port"] for n in shards}  # fmt: skip
    assert len(clients) == 3


def test_the_server_refuses_a_write_outside_the_stores_slot(redis_cluster, shards) -> None:
    engine = Engine()
    engine.store_create("redis", shards[0], url=redis_cluster.url)
    engine.queue_create("q", store=shards[0])
    store = engine.backend(shards[0])
    client, _ = connect(redis_cluster.url)
    home = client.get_node_from_key(f"xump:{{{shards[0]}}}:")
    # a key of another slot that the same node serves: Redis runs it unless told not to
    slot = key_slot(f"xump:{{{shards[0]}}}:".encode())
    while True:
        stray = f"xump:{{{uuid.uuid4().hex[:12]}}}:stray"
        if client.get_node_from_key(stray).name == home.name and key_slot(stray.encode()) != slot:
            break
    store.add_commands([("SET", stray, "1")])
    with pytest.raises(StoreError, match="same slot"):
        store.flush()
    client.close()


def test_a_plain_url_to_a_cluster_node_is_refused_with_what_to_add(redis_cluster) -> None:
    engine = Engine()
    with pytest.raises(StoreError, match=r"is a node of a Redis Cluster: add cluster=true"):
        engine.store_create("redis", "plain", url=redis_cluster.node_urls[1])
    assert [s.name for s in engine.stores()] == ["ram"]


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("/3?cluster=true", "a Redis Cluster has database 0 only, not '3'"),
        ("/0?cluster=maybe", "cluster='maybe' in the Redis URL .* must be true or false"),
        ("/0?cluster=true&nodes=a:1,b", "must list host:port items .*, not 'b'"),
        ("/0?nodes=a:1", r"nodes= in the Redis URL .* needs cluster=true"),
    ],
)
def test_bad_cluster_urls_are_refused(redis_cluster, query: str, error: str) -> None:
    url = redis_cluster.node_urls[0].rsplit("/", 1)[0] + query
    with pytest.raises(StoreError, match=error):
        Engine().store_create("redis", "bad", url=url)


def test_an_unreachable_cluster_is_refused_with_the_url() -> None:
    with pytest.raises(StoreError, match=r"cannot reach the Redis store at redis://127.0.0.1:1"):
        Engine().store_create("redis", "gone", url="redis://127.0.0.1:1/0?cluster=true")


def published_then_moved(cluster, name: str) -> Engine:
    """An engine with queue "q" on store `name`, holding a message b"before" published
    before the store's slot moved to another node."""
    engine = Engine()
    engine.store_create("redis", name, url=cluster.url)
    engine.queue_create("q", store=name)
    engine.publish("q", Message(body=b"before"))
    move_slot(cluster, key_slot(f"xump:{{{name}}}:".encode()))
    return engine


def test_a_store_whose_slot_moves_to_another_node_keeps_working(redis_cluster, shards) -> None:
    name = shards[0]
    engine = published_then_moved(redis_cluster, name)
    store = engine.backend(name)
    redirected = []
    follow = store._run_redirected
    store._run_redirected = lambda words: redirected.append(1) or follow(words)
    engine.publish("q", Message(body=b"after"))  # the old node answers MOVED: followed
    assert redirected == [1]
    again = Engine(catalog=engine.catalog)
    assert [m.body for m in again.peek("q")] == [b"before", b"after"]


def test_a_lease_is_taken_on_a_store_whose_slot_moved(redis_cluster, shards) -> None:
    name = shards[2]
    engine = published_then_moved(redis_cluster, name)
    store = engine.backend(name)
    assert store.acquire_lease("mover", 2000)
    engine.publish("q", Message(body=b"after"))
    store.release_lease()
    assert [m.body for m in Engine(catalog=engine.catalog).peek("q")] == [b"before", b"after"]


def test_a_routers_reads_follow_the_stores_slot_to_another_node(redis_cluster, shards) -> None:
    """RedisStore.read_packed (the router's look at its inbox) sends to the node its client
    knew; when the slot moved, that node answers MOVED and the read goes again through the
    cluster client, which follows it."""
    name = shards[1]
    engine = Engine()
    engine.store_create("redis", name, url=redis_cluster.url)
    store = engine.backend(name)
    inbox = f"xump:{{{name}}}:inbox"
    store.client.rpush(inbox, b"one", b"two")
    move_slot(redis_cluster, key_slot(inbox.encode()))
    reads = [("LRANGE", inbox, 0, -1), ("LRANGE", f"xump:{{{name}}}:autoacked", 0, -1)]
    assert store.read_packed(reads) == [[b"one", b"two"], []]
    assert store.read_packed(reads) == [[b"one", b"two"], []]  # the node it knows now


def move_slot(cluster, slot: int) -> None:
    """Move one slot, with its keys, to the next node (what redis-cli --cluster reshard
    does slot by slot)."""
    clients = [redis.Redis.from_url(url) for url in cluster.node_urls]
    ids = [client.execute_command("CLUSTER MYID").decode() for client in clients]
    owner = next(
        at for at, client in enumerate(clients)
        if client.execute_command("CLUSTER COUNTKEYSINSLOT", slot) > 0
    )  # fmt: skip
    target = (owner + 1) % len(clients)
    source, destination = clients[owner], clients[target]
    destination.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", ids[owner])
    source.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", ids[target])
    while keys := source.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
        port = destination.connection_pool.connection_kwargs["port"]
        source.execute_command("MIGRATE", "127.0.0.1", port, "", 0, 5000, "KEYS", *keys)
    for client in clients:
        client.execute_command("CLUSTER SETSLOT", slot, "NODE", ids[target])
    for client in clients:
        client.close()


@contextmanager
def routing(url: str, name: str):
    """A relay router of store `name` on the cluster, in a thread, routing "q" to "app"."""
    engine = Engine()
    engine.store_create("redis", name, url=url)
    relay = RelayRouter(engine, name, name="test", lease_ms=2000)
    assert relay.acquire(timeout=5)
    engine.queue_create("q", store=name)
    engine.selector_create("q").when_always().do_deliver("app").enable()
    stop = threading.Event()
    serving = threading.Thread(target=relay.serve, args=(stop,))
    serving.start()
    try:
        yield engine
    finally:
        stop.set()
        serving.join()


def relay_round_trip(url: str, name: str) -> list[bytes]:
    with closing(RelayClient(url, name)) as client:
        client.publish_many("q", [Message(body=b"%d" % n) for n in range(10)])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got.extend(client.deliveries("app", count=10, wait=1))
        client.confirm(got)
        return [d.message.body for d in got]


def test_a_relay_router_routes_a_shard_on_the_cluster(redis_cluster, shards) -> None:
    """The router's side of the relay (engine/relay/router.py) runs on a cluster store; its
    client is pointed at the shard's own node here (see the next test)."""
    name = shards[1]
    client, _ = connect(redis_cluster.url)
    home = client.get_node_from_key(f"xump:{{{name}}}:")
    client.close()
    with routing(redis_cluster.url, name):
        bodies = relay_round_trip(f"redis://{home.name}/0", name)
    assert bodies == [b"%d" % n for n in range(10)]


def test_a_relay_client_reaches_a_shard_through_the_cluster_url(redis_cluster, shards) -> None:
    with routing(redis_cluster.url, shards[2]):
        bodies = relay_round_trip(redis_cluster.url, shards[2])
    assert bodies == [b"%d" % n for n in range(10)]


def test_a_node_down_while_running_pauses_only_the_shard_on_it(tmp_path) -> None:
    """With `cluster-require-full-coverage no` on the servers: with Redis's default (yes)
    every node refuses every command (CLUSTERDOWN) once one master is seen failed, and all
    shards would stop."""
    made = iter(range(3))
    cluster = start_cluster(
        lambda: tmp_path / str(next(made)),
        "--cluster-require-full-coverage", "no", "--cluster-node-timeout", "1000",
    )  # fmt: skip
    try:
        names = store_names(cluster, [0, 1, 2])
        # every node to start from: a process that starts later finds the live ones
        url = cluster.url + "&nodes=" + ",".join(f"127.0.0.1:{port}" for port in cluster.ports)
        engine = Engine()
        for name in names:
            engine.store_create("redis", name, url=url)
            engine.queue_create(f"q-{name}", store=name)
            engine.publish(f"q-{name}", Message(body=b"before"))
        client, _ = connect(cluster.url)
        down = client.get_node_from_key(f"xump:{{{names[2]}}}:").port  # the third shard's
        client.close()
        at = cluster.ports.index(down)
        cluster.processes[at].kill()
        cluster.processes[at].wait()
        survivor = redis.Redis.from_url(cluster.node_urls[(at + 1) % 3])
        eventually_failed = time.monotonic() + 30
        while "fail" not in survivor.cluster("NODES")[f"127.0.0.1:{down}"]["flags"]:
            assert time.monotonic() < eventually_failed, "the node was never seen failed"
            time.sleep(0.05)
        survivor.close()

        for name in names[:2]:  # the other shards keep going, in this engine and a new one
            # as after a restart of their node: the apply script is loaded again, there
            home = engine.backend(name).client.get_node_from_key(f"xump:{{{name}}}:")
            home.redis_connection.script_flush()
            engine.publish(f"q-{name}", Message(body=b"after"))
        with pytest.raises(StoreError, match=f"the Redis store {names[2]!r} at .* failed"):
            engine.publish(f"q-{names[2]}", Message(body=b"after"))
        again = Engine(catalog=MemoryCatalog())
        again.store_create("redis", names[0], url=url)
        again.queue_create(f"q-{names[0]}", store=names[0])
        assert [m.body for m in again.peek(f"q-{names[0]}")] == [b"before", b"after"]
    finally:
        cluster.stop()
