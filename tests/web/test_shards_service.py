"""The service on shards (SPEC §10): XUMP_SHARDS=4 over one redis-server, Celery workers
routing the shards' leases, the web process and the STOMP server publishing and
delivering by each queue's shard. Through the public interfaces only: the HTTP API,
STOMP (stomp.py), and the leases as Redis holds them."""

from __future__ import annotations

import itertools
import json
import zlib
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest
import redis

from tests.conftest import start_cluster
from tests.web.conftest import _answers, _serve, start_service, unique, wait_for
from tests.web.stomp_clients import Client, disconnect_all, stomp_connection

SHARDS = 4
WITHIN = 120.0


def shard_names(store: str) -> list[str]:
    return [store] + [f"{store}-{n}" for n in range(1, SHARDS)]


def placed(name: str, shards: list[str]) -> str:
    """Where placement puts a new queue `name` without a `:` (engine/placement.py)."""
    return shards[zlib.crc32(name.encode()) % len(shards)]


def one_per_shard(shards: list[str], prefix: str) -> dict[str, str]:
    """A fresh queue name for each shard: shard -> name."""
    found: dict[str, str] = {}
    while len(found) < len(shards):
        name = unique(prefix)
        found.setdefault(placed(name, shards), name)
    return found


def holders(client: redis.Redis, shards: list[str]) -> dict[str, str | None]:
    """shard -> the Celery node holding its lease (None: free)."""
    found = {}
    for shard in shards:
        value = client.get(f"xump:{{{shard}}}:lease")
        found[shard] = value.decode().split(":")[0] if value else None
    return found


def delivering(http, name: str) -> dict:
    """Make queue `name` whose one selector delivers everything to destination `name`;
    the queue as made."""
    made = http.post("/api/queues", json={"name": name})
    assert made.status_code == 201, made.text
    selector = http.post(f"/api/queues/{name}/selectors", json={
        "when": "always", "action": "deliver", "target": name, "enabled": True})  # fmt: skip
    assert selector.status_code == 201, selector.text
    return made.json()


@pytest.fixture(scope="module", params=["server", "cluster"])
def sharded(request, redis_server, tmp_path_factory):
    """The service on 4 shards with worker routing: over the session's redis-server, and
    over the session's 3-node Redis Cluster (Celery's broker and the Channels layer then
    on the redis-server, as neither can use a cluster)."""
    directory = tmp_path_factory.mktemp("shards")
    if request.param == "server":
        service = start_service(redis_server.url, directory, "worker", XUMP_SHARDS=str(SHARDS))
        service.redis = redis.Redis.from_url(redis_server.url)
    else:
        cluster = request.getfixturevalue("redis_cluster")
        service = start_service(cluster.node_urls[0], directory, "worker",
                                XUMP_SHARDS=str(SHARDS), XUMP_REDIS_CLUSTER="true",
                                XUMP_BROKER_URL=redis_server.url,
                                XUMP_CHANNELS_URL=redis_server.url)  # fmt: skip
        service.redis = redis.RedisCluster.from_url(cluster.node_urls[0])
    service.shards = shard_names(service.env["XUMP_STORE"])
    service.start_worker("first")
    service.stomp_port = service.start_stomp()
    yield service
    service.close()


@pytest.fixture
def stomp(sharded):
    made: list[Client] = []

    def connect() -> Client:
        client = Client(stomp_connection(sharded, sharded.stomp_port))
        client.connection.connect("tests", sharded.admin_token, wait=True)
        made.append(client)
        return client

    yield connect
    disconnect_all(made)


def test_queues_are_placed_over_the_shards_and_each_delivers_from_its_own(sharded, stomp):
    names = one_per_shard(sharded.shards, "placed")
    with sharded.client() as http:
        for shard, name in names.items():
            assert delivering(http, name)["store"] == shard
        for name in names.values():  # HTTP publishes, each to its queue's shard
            for n in range(5):
                assert http.post(f"/api/queues/{name}/publish", json={
                    "address": "a", "body": f"{name}-{n}"}).status_code == 202  # fmt: skip
    consumer, publisher = stomp(), stomp()
    for sid, name in enumerate(names.values()):
        consumer.subscribe(f"/queue/{name}", sid=str(sid), ack="auto")
    for name in names.values():  # and STOMP SENDs, through the STOMP server's group commit
        for n in range(5, 10):
            publisher.send(f"/queue/{name}", f"{name}-{n}", receipt=f"{name}-{n}")
    for name in names.values():
        publisher.receipt(f"{name}-9")
    got = consumer.take(10 * len(names), within=WITHIN)
    bodies = sorted(frame.body for frame in got)
    assert bodies == sorted(f"{name}-{n}" for name in names.values() for n in range(10))
    # each queue's own order holds (FIFO per queue)
    for name in names.values():
        mine = [frame.body for frame in got if frame.body.startswith(name + "-")]
        assert mine == [f"{name}-{n}" for n in range(10)]


def test_a_move_chain_across_shards_delivers_once_and_settles_back(sharded, stomp):
    names = list(one_per_shard(sharded.shards, "chain").values())
    first, last = names[0], names[-1]
    with sharded.client() as http:
        for name in names:
            assert http.post("/api/queues", json={"name": name}).status_code == 201
        for source, target in itertools.pairwise(names):
            made = http.post(f"/api/queues/{source}/selectors", json={
                "when": "always", "action": "move", "target": target, "credit": 3,
                "enabled": True})  # fmt: skip
            assert made.status_code == 201, made.text
        assert http.post(f"/api/queues/{last}/selectors", json={
            "when": "always", "action": "deliver", "target": last,
            "enabled": True}).status_code == 201  # fmt: skip
        consumer = stomp()
        consumer.subscribe(f"/queue/{last}", ack="client-individual")
        mids = []
        for n in range(20):
            published = http.post(f"/api/queues/{first}/publish", json={"body": f"m{n}"})
            assert published.status_code == 202
            mids.append(published.json()["mid"])
        # credit 3 at each hop: the chain holds back until acks settle back up it
        for count in range(1, 21):
            frame = consumer.take(count, within=WITHIN)[-1]
            consumer.ack(frame)
        assert [frame.body for frame in consumer.messages] == [f"m{n}" for n in range(20)]

        def settled() -> bool:
            stats = [http.get(f"/api/queues/{name}").json() for name in names[:-1]]
            return all(queue["outstanding"] == 0 for queue in stats)

        assert wait_for(settled, within=WITHIN), [http.get(f"/api/queues/{n}").json()
                                                  for n in names]  # fmt: skip
        # its lineage crosses the shards: every shard's journal is read
        steps = http.get(f"/api/messages/{mids[0]}/trace").json()["steps"]
        assert {step["queue"] for step in steps} >= set(names), steps


def test_a_wolfpack_whose_workers_are_read_on_other_shards_delivers_through_them(sharded, stomp):
    """A DELIVER to a destination read on another shard is a MOVE into its delivery queue
    there (a mailbox the service makes), settled back when the worker acks: the pack's
    credit and the router queue's counts stay true."""
    shards = sharded.shards
    router = one_per_shard(shards, "pack")[shards[0]]
    workers = [one_per_shard(shards, "w")[shard] for shard in shards[1:3]]
    with sharded.client() as http:
        for worker in workers:
            made = http.post("/api/patterns", json={
                "kind": "wolfpack", "router": router, "name": worker, "credit": 2})  # fmt: skip
            assert made.status_code in (200, 201), made.text
        for worker, shard in zip(workers, shards[1:3], strict=True):
            queue = http.get(f"/api/queues/{worker}").json()  # its delivery queue, at home
            assert queue["store"] == shard and queue["mailbox"] is True
        consumers = {worker: stomp() for worker in workers}
        for worker, consumer in consumers.items():
            consumer.subscribe(f"/queue/{worker}", ack="client-individual")
            consumer.auto_ack = True
        for n in range(30):
            assert http.post(f"/api/queues/{router}/publish",
                             json={"body": f"job{n}"}).status_code == 202  # fmt: skip

        def received() -> list[str]:
            return [f.body for c in consumers.values() for f in c.messages]

        assert wait_for(lambda: len(received()) >= 30, within=WITHIN), received()
        assert sorted(received()) == sorted(f"job{n}" for n in range(30))
        assert all(consumer.messages for consumer in consumers.values())

        def settled() -> bool:
            queue = http.get(f"/api/queues/{router}").json()
            return queue["outstanding"] == 0 and queue["depth"] == 0

        assert wait_for(settled, within=WITHIN), http.get(f"/api/queues/{router}").json()


def test_a_second_worker_takes_its_share_and_routes_on_when_the_first_is_killed(sharded, stomp):
    shards = sharded.shards
    assert wait_for(lambda: all(holders(sharded.redis, shards).values()), within=WITHIN)
    sharded.start_worker("second")

    # balanced: two workers, two shards each (a joining worker takes its share)
    def balanced() -> bool:
        found = list(holders(sharded.redis, shards).values())
        return None not in found and sorted(Counter(found).values()) == [2, 2]

    assert wait_for(balanced, within=WITHIN), holders(sharded.redis, shards)

    names = one_per_shard(shards, "kill")
    with sharded.client() as http:
        for name in names.values():
            delivering(http, name)
        consumer = stomp()
        for sid, name in enumerate(names.values()):
            consumer.subscribe(f"/queue/{name}", sid=str(sid), ack="client-individual")
        consumer.auto_ack = True
        for name in names.values():
            for n in range(10):
                assert http.post(f"/api/queues/{name}/publish",
                                 json={"body": f"{name}-{n}"}).status_code == 202  # fmt: skip
        consumer.take(10 * len(names), within=WITHIN)
        sharded.stop("first", kill=True)
        # the survivor takes every shard within the lease time (and a look or two)
        assert wait_for(
            lambda: (
                len(set(holders(sharded.redis, shards).values()) - {None}) == 1
                and None not in holders(sharded.redis, shards).values()
            ),
            within=WITHIN,
        )
        for name in names.values():
            for n in range(10, 20):
                assert http.post(f"/api/queues/{name}/publish",
                                 json={"body": f"{name}-{n}"}).status_code == 202  # fmt: skip
        got = consumer.take(20 * len(names), within=WITHIN)
    bodies = [frame.body for frame in got]
    expected = {f"{name}-{n}" for name in names.values() for n in range(20)}
    # nothing lost; a message the killed worker's router delivered but whose ack it had
    # not applied may come again, flagged as a redelivery
    assert set(bodies) == expected
    again = [frame for frame in got if bodies.count(frame.body) > 1]
    assert all(frame.headers.get("redelivered") == "true" for frame in again
               if frame is not got[bodies.index(frame.body)])  # fmt: skip


def test_the_shards_and_their_routers_are_visible(sharded):
    assert wait_for(lambda: None not in holders(sharded.redis, sharded.shards).values(),
                    within=WITHIN)  # fmt: skip
    with sharded.client() as http:
        for name in one_per_shard(sharded.shards, "seen").values():  # a queue on each
            assert http.post("/api/queues", json={"name": name}).status_code == 201
        health = http.get("/api/health").json()
        assert sorted(health["workers"]["routers"]) == sorted(sharded.shards)

        def reported() -> list:
            # a router's forwards leave its list at its next commit (within a second), so
            # right after a test that crossed shards a backlog may still be seen
            # and the lease holders read just after agree with it: the workers balance
            # their leases, so a shard may change hands between two reads (then look again)
            found = http.get("/api/shards").json()["shards"]
            nodes = holders(sharded.redis, sharded.shards)
            settled = all(shard["inbox"] == 0 and shard["forward_backlog"] == 0
                          for shard in found)  # fmt: skip
            agreed = all(shard["since"] and shard["routed_by"]
                         and shard["routed_by"].split(":")[0] == nodes[shard["name"]]
                         for shard in found)  # fmt: skip
            return found if settled and agreed else []

        found = wait_for(reported, within=WITHIN)
    assert [shard["name"] for shard in found] == sharded.shards
    assert all(shard["ok"] for shard in found), found
    assert all(shard["queues"] >= 1 for shard in found), found


def test_a_queue_lives_in_its_shards_keys_only(sharded):
    name = one_per_shard(sharded.shards, "alone")[sharded.shards[1]]

    def listed() -> set[str]:
        return {queue["name"] for queue in http.get("/api/queues?limit=1000").json()["queues"]}

    with sharded.client() as http:
        assert name not in listed()
        made = http.post("/api/queues", json={"name": name, "history": 10})
        assert made.status_code == 201
        store = made.json()["store"]
        assert http.post(f"/api/queues/{name}/publish", json={"body": "x"}).status_code == 202
        assert wait_for(lambda: http.get(f"/api/queues/{name}").json()["depth"] == 1,
                        within=WITHIN)  # fmt: skip
    found = {key.decode() for key in sharded.redis.scan_iter(f"*{name}*")}  # every node
    assert found and all(f"{{{store}}}" in key for key in found), found
    with sharded.client() as http:  # and the listing has it at once, whatever its shard
        assert name in listed()


def test_the_command_line_publishes_and_subscribes_on_every_shard(sharded):
    names = one_per_shard(sharded.shards, "cli")
    with sharded.client() as http:
        for name in names.values():
            delivering(http, name)
    queues = list(names.values())
    # the `xump publish` and `xump subscribe` commands of manage.py, every shard's in one
    # Django process (each start of manage.py is seconds of start-up on a busy machine;
    # tests/web/test_cli.py runs the command line as processes)
    printed = sharded.shell(
        "import io, json\n"
        "from contextlib import redirect_stdout\n"
        "from django.core.management import call_command\n"
        f"queues = {queues!r}\n"
        "for name in queues:\n"
        "    call_command('xump', 'publish', name, f'to {name}')\n"
        "for name in queues:\n"
        "    taken = io.StringIO()\n"
        "    with redirect_stdout(taken):\n"
        "        call_command('xump', 'subscribe', name, '--count', '1')\n"
        "    print(json.dumps([name, taken.getvalue().splitlines()]))\n"
    )
    found = dict(json.loads(line) for line in printed.splitlines() if line.startswith("["))
    assert set(found) == set(queues), printed
    for name, lines in found.items():
        assert [json.loads(line)["message"]["body"] for line in lines] == [f"to {name}"]


def test_inline_routing_routes_every_shard_in_the_web_process(redis_server, tmp_path):
    service = start_service(redis_server.url, tmp_path, "inline", XUMP_SHARDS="3")
    try:
        shards = shard_names(service.env["XUMP_STORE"])[:3]
        names = one_per_shard(shards, "inline")
        with service.client() as http:
            for name in names.values():
                assert http.post("/api/queues", json={"name": name}).status_code == 201
            chain = list(names.values())
            for source, target in itertools.pairwise(chain):
                assert http.post(f"/api/queues/{source}/selectors", json={
                    "when": "always", "action": "copy", "target": target,
                    "enabled": True}).status_code == 201  # fmt: skip
            assert http.post(f"/api/queues/{chain[0]}/publish",
                             json={"body": "x"}).status_code == 202  # fmt: skip

            def arrived() -> bool:  # copied on at each shard, kept at the last
                return http.get(f"/api/queues/{chain[-1]}").json()["depth"] == 1

            assert wait_for(arrived, within=WITHIN)
            found = http.get("/api/shards").json()["shards"]
        assert all(shard["routed_by"] for shard in found), found
    finally:
        service.close()


def test_fewer_shards_while_a_removed_one_holds_queues_is_refused_at_start(redis_server, tmp_path):
    """Adding shards later moves nothing (new queues use them); removing one needs it empty:
    `manage.py migrate` (which `make run` starts with) says which and what to do."""
    service = start_service(redis_server.url, tmp_path, "inline", XUMP_SHARDS="2")
    try:
        shards = shard_names(service.env["XUMP_STORE"])
        before = one_per_shard(shards[:2], "old")
        with service.client() as http:
            for name in before.values():
                assert http.post("/api/queues", json={"name": name}).status_code == 201
        restart(service, XUMP_SHARDS="3")
        with service.client() as http:  # the old queues stay where they are
            for shard, name in before.items():
                assert http.get(f"/api/queues/{name}").json()["store"] == shard
            new = one_per_shard(shards[:3], "new")[shards[2]]
            made = http.post("/api/queues", json={"name": new})
            assert made.status_code == 201 and made.json()["store"] == shards[2]
    finally:
        service.close()
    service.env["XUMP_SHARDS"] = "2"
    refused = service.manage("migrate", "--noinput")
    assert refused.returncode != 0
    assert f"XUMP_SHARDS=2 leaves out shards that hold queues: {shards[2]} (1 queue(s))" in (
        refused.stderr + refused.stdout
    )
    assert "Traceback" not in refused.stderr


def restart(service, **settings: str) -> None:
    """Stop the web process and start it again on its port with these settings changed."""
    service.stop("server")
    service.env.update(settings)
    port = int(service.url.rsplit(":", 1)[1])
    log = Path(service.env["XUMP_TEST_DIR"]) / "server.log"
    service.processes["server"] = _serve(service.env, port, log)
    assert _answers(service.url, service.processes["server"], within=120)


def test_dead_letters_and_message_operations_go_to_a_queue_on_another_shard(sharded, stomp):
    """The dead-letter inspector's send and a message operation into a queue another
    shard holds: forwarded in the router's step, routed there (they were refused)."""
    names = one_per_shard(sharded.shards, "dl")
    dead, orders, parked = (names[shard] for shard in sharded.shards[:3])
    consumer = stomp()
    with sharded.client() as http:
        assert http.post("/api/queues", json={"name": dead}).status_code == 201
        made = http.post("/api/queues", json={"name": orders, "dead_letter": dead})
        assert made.status_code == 201, made.text
        assert http.post("/api/queues", json={"name": parked}).status_code == 201
        # orders takes only address "known": anything else is dead-lettered on dead's shard
        assert http.post(f"/api/queues/{orders}/selectors", json={
            "when": "match", "match": {"operator": "eq", "pattern": "known"},
            "action": "deliver", "target": orders, "enabled": True}).status_code == 201  # fmt: skip
        assert http.post(f"/api/queues/{orders}/publish",
                         json={"address": "stray", "body": "lost"}).status_code == 202  # fmt: skip

        def letters() -> list[dict]:
            return http.get(f"/api/queues/{dead}/waiting").json()["messages"]

        assert wait_for(lambda: len(letters()) == 1, within=WITHIN)
        [letter] = letters()
        assert letter["headers"]["x-reason"] == "unroutable"
        consumer.subscribe(f"/queue/{orders}", ack="auto")
        # a catch-all now, and the dead letter sent back to the queue it came from
        assert http.post(f"/api/queues/{orders}/selectors", json={
            "when": "default", "action": "deliver", "target": orders,
            "enabled": True}).status_code == 201  # fmt: skip
        sent = http.post(f"/api/queues/{dead}/dead-letters/send", json={"seqs": [letter["seq"]]})
        assert sent.status_code == 200, sent.text
        assert sent.json()["sent"] == 1
        [frame] = consumer.take(1, within=WITHIN)
        assert frame.body == "lost"
        assert letters() == []
        # and a message operation: parked's messages moved into orders, on its shard
        for n in range(3):
            assert http.post(f"/api/queues/{parked}/publish", json={
                "address": "known", "body": f"parked-{n}"}).status_code == 202  # fmt: skip
        assert wait_for(lambda: http.get(f"/api/queues/{parked}").json()["depth"] == 3,
                        within=WITHIN)  # fmt: skip
        moved = http.post(
            f"/api/queues/{parked}/messages/operate",
            json={"action": "move", "target": orders, "filter": "TRUE"},
        )
        assert moved.status_code == 200, moved.text
        assert moved.json()["done"] == 3
        got = consumer.take(4, within=WITHIN)  # the first message first
        assert [frame.body for frame in got] == ["lost"] + [f"parked-{n}" for n in range(3)]


def spread_store(client: redis.RedisCluster) -> tuple[str, dict[str, int]]:
    """A store name whose shards are not all on shard 0's node; with each shard's node port."""
    while True:
        store = unique("t").replace("-", "")
        ports = {shard: client.get_node_from_key(f"xump:{{{shard}}}:inbox").port
                 for shard in shard_names(store)}  # fmt: skip
        if len(set(ports.values())) > 1:
            return store, ports


def test_a_node_down_pauses_its_shards_and_the_others_route_on(redis_server, tmp_path_factory):
    # as an operator who wants the other shards to go on sets it (README, Scaling out): by
    # default a cluster with a slot uncovered refuses every command (CLUSTERDOWN)
    cluster = start_cluster(lambda: tmp_path_factory.mktemp("node-down"),
                            "--cluster-require-full-coverage", "no")  # fmt: skip
    made: list[Client] = []
    try:
        with closing(redis.RedisCluster.from_url(cluster.node_urls[0])) as client:
            store, ports = spread_store(client)
        down = next(port for port in ports.values() if port != ports[store])
        paused = [shard for shard, port in ports.items() if port == down]
        live = [shard for shard, port in ports.items() if port != down]
        # every node named, as README says: a process that starts while one is down finds
        # the cluster through the others
        others = ",".join(url.removeprefix("redis://").removesuffix("/0")
                          for url in cluster.node_urls[1:])  # fmt: skip
        url = f"{cluster.node_urls[0]}?nodes={others}"
        service = start_service(url, tmp_path_factory.mktemp("node-down-service"),
                                "worker", XUMP_STORE=store, XUMP_SHARDS=str(SHARDS),
                                XUMP_REDIS_CLUSTER="true", XUMP_BROKER_URL=redis_server.url,
                                XUMP_CHANNELS_URL=redis_server.url)  # fmt: skip
        service.start_worker()
        port = service.start_stomp()
        names = one_per_shard(shard_names(store), "down")
        with service.client() as http:
            for name in names.values():
                delivering(http, name)
                assert http.post(f"/api/queues/{name}/publish",
                                 json={"body": f"before-{name}"}).status_code == 202  # fmt: skip
            cluster.kill_node(down)

            def reported() -> bool:
                found = {shard["name"]: shard for shard in http.get("/api/shards").json()["shards"]}
                return all(not found[shard]["ok"] and found[shard]["problem"] for shard in paused) \
                    and all(found[shard]["ok"] for shard in live)  # fmt: skip

            assert wait_for(reported, within=WITHIN)
            for shard in paused:  # refused with a clear error, nothing half-done
                refused = http.post(f"/api/queues/{names[shard]}/publish", json={"body": "x"})
                assert refused.status_code == 503, refused.text
                assert refused.json()["error"] == "store_unavailable"
            for shard in live:  # the others take publishes and route them
                body = {"body": f"during-{names[shard]}"}
                assert (
                    http.post(f"/api/queues/{names[shard]}/publish", json=body).status_code == 202
                )
        consumer = Client(stomp_connection(service, port))
        made.append(consumer)
        consumer.connection.connect("tests", service.admin_token, wait=True)
        for shard in live:
            consumer.subscribe(f"/queue/{names[shard]}", sid=shard, ack="auto")
        got = sorted(frame.body for frame in consumer.take(2 * len(live), within=WITHIN))
        assert got == sorted(f"{when}-{names[shard]}" for shard in live
                             for when in ("before", "during"))  # fmt: skip

        cluster.restart_node(down)  # what was acknowledged before is there, once
        with service.client() as http:
            for shard in paused:
                published = http.post(f"/api/queues/{names[shard]}/publish",
                                      json={"body": f"after-{names[shard]}"})  # fmt: skip
                assert published.status_code == 202, published.text
        for shard in paused:
            consumer.subscribe(f"/queue/{names[shard]}", sid=shard, ack="auto")
        taken = consumer.take(2 * (len(live) + len(paused)), within=WITHIN)
        got = [frame.body for frame in taken[2 * len(live) :]]  # after those of the live ones
        for shard in paused:
            mine = [body for body in got if body.endswith(names[shard])]
            assert mine == [f"before-{names[shard]}", f"after-{names[shard]}"]
    finally:
        disconnect_all(made)
        if "service" in locals():
            service.close()
        cluster.stop()
