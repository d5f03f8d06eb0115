"""The settings of shards and Redis Cluster (SPEC §10) refuse bad input at start, through
the real entry points (`manage.py check`, the Celery worker), with one line each: what is
wrong and what to set. No traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from engine.stores.redis_connect import split_cluster_options
from tests.conftest import start_cluster

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SIDE = {"XUMP_BROKER_URL": "amqp://guest:guest@localhost:5672//"}


def start(entry: str, tmp_path: Path, **settings: str) -> subprocess.CompletedProcess:
    """Run an entry point with these settings (and nothing else of XUMP_ from here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XUMP_", "DJANGO_"))}
    env.update(XUMP_SECRET_KEY="test", DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3", **settings)
    command = {
        "check": [sys.executable, "manage.py", "check"],
        "worker": [sys.executable, "-m", "celery", "-A", "xumpweb", "worker", "--pool", "solo"],
    }[entry]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def refused(result: subprocess.CompletedProcess) -> str:
    """The one line a refused start printed."""
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("entry", ["check", "worker"])
@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_shards_must_be_a_positive_integer(tmp_path, redis_server, entry, value) -> None:
    result = start(entry, tmp_path, XUMP_REDIS_URL=redis_server.url, XUMP_SHARDS=value)
    assert refused(result) == f"XUMP_SHARDS must be a positive integer (1, 2, ...), not {value!r}"


@pytest.mark.parametrize("value", ["1", " "])
def test_one_shard_is_todays_single_store_and_starts(tmp_path, redis_server, value) -> None:
    result = start("check", tmp_path, XUMP_REDIS_URL=redis_server.url, XUMP_SHARDS=value)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_more_shards_start(tmp_path, redis_server) -> None:
    result = start("check", tmp_path, XUMP_REDIS_URL=redis_server.url, XUMP_SHARDS="4")
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_the_cluster_flag_must_be_true_or_false(tmp_path) -> None:
    line = refused(start("check", tmp_path, XUMP_REDIS_CLUSTER="maybe"))
    assert line == "XUMP_REDIS_CLUSTER must be true or false, not 'maybe'"


@pytest.mark.parametrize("entry", ["check", "worker"])
def test_a_cluster_needs_its_own_broker_url(tmp_path, redis_cluster, entry) -> None:
    url = redis_cluster.node_urls[0]
    line = refused(start(entry, tmp_path, XUMP_REDIS_URL=url, XUMP_REDIS_CLUSTER="true"))
    assert line == (
        "XUMP_REDIS_CLUSTER=true: Celery's broker has no Redis Cluster mode; set "
        "XUMP_BROKER_URL to amqp://... (RabbitMQ) or a single Redis server's redis://... URL"
    )


def test_a_cluster_needs_its_own_channels_url(tmp_path, redis_cluster) -> None:
    line = refused(
        start("check", tmp_path, XUMP_REDIS_URL=redis_cluster.node_urls[0],
              XUMP_REDIS_CLUSTER="true", **CLUSTER_SIDE)
    )  # fmt: skip
    assert line == (
        "XUMP_REDIS_CLUSTER=true: the Channels layer has no Redis Cluster mode; set "
        "XUMP_CHANNELS_URL to a single Redis server's redis://... URL"
    )


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        ("XUMP_BROKER_URL", "http://rabbit", "XUMP_BROKER_URL must be an amqp:// (RabbitMQ), "
         "redis:// or redis+socket:// URL, not 'http://rabbit'"),
        ("XUMP_CHANNELS_URL", "amqp://rabbit", "XUMP_CHANNELS_URL must be a redis:// URL of a "
         "single Redis server, not 'amqp://rabbit'"),
    ],
)  # fmt: skip
def test_broker_and_channels_urls_of_the_wrong_kind_are_refused(
    tmp_path, redis_server, name, value, line
) -> None:
    assert refused(start("check", tmp_path, XUMP_REDIS_URL=redis_server.url, **{name: value})) == (
        line
    )


@pytest.mark.parametrize("entry", ["check", "worker"])
def test_a_cluster_url_without_the_cluster_flag_is_refused(tmp_path, redis_cluster, entry) -> None:
    url = redis_cluster.node_urls[1]
    assert refused(start(entry, tmp_path, XUMP_REDIS_URL=url)) == (
        f"XUMP_REDIS_URL {url} is a node of a Redis Cluster: set XUMP_REDIS_CLUSTER=true, and "
        "XUMP_BROKER_URL and XUMP_CHANNELS_URL (Celery and Channels cannot use a cluster)"
    )


def cluster_settings(url: str, channels: str) -> dict[str, str]:
    return {"XUMP_REDIS_URL": url, "XUMP_REDIS_CLUSTER": "true",
            "XUMP_CHANNELS_URL": channels, **CLUSTER_SIDE}  # fmt: skip


def test_the_cluster_flag_on_a_single_server_is_refused(tmp_path, redis_server) -> None:
    settings = cluster_settings(redis_server.url, redis_server.url)
    assert refused(start("check", tmp_path, **settings)) == (
        f"XUMP_REDIS_CLUSTER=true but XUMP_REDIS_URL {redis_server.url} is a single Redis "
        "server (cluster_enabled:0): unset XUMP_REDIS_CLUSTER, or give a cluster node's URL"
    )


def test_a_cluster_that_does_not_answer_is_refused(tmp_path, redis_server) -> None:
    settings = cluster_settings("redis://127.0.0.1:1/0", redis_server.url)
    line = refused(start("check", tmp_path, **settings))
    assert line.startswith(
        "XUMP_REDIS_CLUSTER=true but no Redis Cluster node answers at redis://127.0.0.1:1/0 ("
    )
    assert line.endswith("): start the cluster, or point XUMP_REDIS_URL at a node that runs")


def test_a_healthy_cluster_passes_every_check(tmp_path, redis_cluster, redis_server) -> None:
    settings = cluster_settings(redis_cluster.node_urls[2], redis_server.url)
    result = start("check", tmp_path, **settings)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_a_cluster_url_may_list_more_nodes_to_start_from(tmp_path, redis_cluster, redis_server):
    others = ",".join(url.removeprefix("redis://").removesuffix("/0")
                      for url in redis_cluster.node_urls[1:])  # fmt: skip
    url = f"{redis_cluster.node_urls[0]}?nodes={others}"
    result = start("check", tmp_path, **cluster_settings(url, redis_server.url))
    assert result.returncode == 0, result.stderr


def test_more_nodes_without_the_cluster_flag_are_refused(tmp_path, redis_server) -> None:
    url = f"{redis_server.url}?nodes=127.0.0.1:1"
    assert refused(start("check", tmp_path, XUMP_REDIS_URL=url)) == (
        f"XUMP_REDIS_URL {url} lists nodes=, more nodes of a Redis Cluster: set "
        "XUMP_REDIS_CLUSTER=true, or remove it"
    )


def test_more_nodes_that_are_not_host_port_pairs_are_refused(tmp_path, redis_cluster, redis_server):
    url = f"{redis_cluster.node_urls[0]}?nodes=nowhere"
    assert refused(start("check", tmp_path, **cluster_settings(url, redis_server.url))) == (
        f"nodes= in XUMP_REDIS_URL {url} must list host:port items separated by commas, "
        "not 'nowhere'"
    )


@pytest.fixture
def own_cluster(tmp_path_factory):
    """A cluster of this test's own, to break."""
    cluster = start_cluster(lambda: tmp_path_factory.mktemp("broken-cluster"))
    yield cluster
    cluster.stop()


@pytest.mark.parametrize("entry", ["check", "worker"])
def test_a_cluster_missing_slots_is_refused(tmp_path, own_cluster, redis_server, entry) -> None:
    for url in own_cluster.node_urls:  # every node forgets who serves them
        redis.Redis.from_url(url).execute_command("CLUSTER DELSLOTSRANGE", 16000, 16383)
    settings = cluster_settings(own_cluster.node_urls[0], redis_server.url)
    host = f"127.0.0.1:{own_cluster.ports[0]}"
    assert refused(start(entry, tmp_path, **settings)) == (
        f"the Redis Cluster at {own_cluster.node_urls[0]} serves 16000 of 16384 slots: assign "
        f"the missing ones (redis-cli --cluster fix {host})"
    )


@pytest.mark.parametrize("entry", ["check", "worker"])
def test_a_cluster_with_a_node_down_at_start_is_refused(
    tmp_path, own_cluster, redis_server, entry
) -> None:
    down = own_cluster.processes[2]
    down.kill()
    down.wait()
    settings = cluster_settings(own_cluster.node_urls[0], redis_server.url)
    assert refused(start(entry, tmp_path, **settings)) == (
        f"Redis Cluster node 127.0.0.1:{own_cluster.ports[2]} holds slots but does not answer: "
        "start it (or fail its slots over to a replica) before the service"
    )


@pytest.mark.parametrize(
    ("url", "line"),
    [
        ("localhost:6379",
         "XUMP_REDIS_URL localhost:6379 is not a Redis URL (redis://host:port/db): Redis URL "
         "must specify one of the following schemes (redis://, rediss://, unix://)"),
        ("redis://127.0.0.1:1/0?cluster=true",
         "XUMP_REDIS_URL redis://127.0.0.1:1/0?cluster=true carries cluster=true, which is for "
         "a store's URL: give the node's plain URL and set XUMP_REDIS_CLUSTER=true"),
    ],
)  # fmt: skip
def test_a_redis_url_that_is_not_one_is_refused(tmp_path, url, line) -> None:
    assert refused(start("check", tmp_path, XUMP_REDIS_URL=url)) == line


def test_a_redis_url_of_a_unix_socket_starts(tmp_path, unix_redis) -> None:
    """unix:// is one of redis-py's URL forms; the start-up check once made it `unix:/...`,
    which redis-py refused ("is not a Redis URL"). (tests/web/test_unix_socket.py runs the
    service on one.)"""
    _, socket_path = unix_redis
    result = start("check", tmp_path, XUMP_REDIS_URL=f"unix://{socket_path}?db=3")
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_a_unix_socket_url_keeps_its_form_when_its_cluster_options_are_taken_off() -> None:
    assert split_cluster_options("unix:///run/redis/redis.sock?db=2&cluster=false") == (
        "unix:///run/redis/redis.sock?db=2",
        False,
        [],
    )


def test_a_single_server_that_does_not_answer_yet_does_not_stop_the_start(tmp_path) -> None:
    """The processes wait for Redis and the console says it is away (as before)."""
    result = start("check", tmp_path, XUMP_REDIS_URL="redis://127.0.0.1:1/0")
    assert result.returncode == 0, result.stderr
