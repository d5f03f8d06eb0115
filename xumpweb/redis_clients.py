"""The service's Redis clients: one Redis server, or with XUMP_REDIS_CLUSTER=true a Redis
Cluster (SPEC §10, docs/scaling.md).

Theory of operation. Every key of a shard carries the shard's hash tag (`xump:{S}:...`),
so one cluster node serves the whole shard: its inbox, outboxes, claims, replies, leases
and doorbell. So:

* a process's clients of one shard (its relay client for publishes, acks and calls, its
  group commit of publishes, its subscribers' outbox readers with their blocking claims
  and presence keys) talk to the node that serves the shard's slot with plain clients
  (`node_url`, `for_store`): every pipeline and script of a shard goes whole to one
  server, as on a single Redis server (a cluster client refuses PUBLISH and EVALSHA in a
  pipeline), and a blocking BLMOVE and the CLIENT UNBLOCK that ends it reach the same
  server;
* a shard's router opens its store with the store URL (`store_url`: with `cluster=true`
  on a cluster), as the engine's Redis store does: redis-py's RedisCluster;
* what reads keys of several shards at once (the wiring versions, the leases) uses a
  cluster client (`general`, `general_sync`) and `get_many` (MGET on one server; one GET
  per key, pipelined by node, on a cluster).

The service-wide keys (tokens' version, workers' heartbeats, import status) carry shard
0's hash tag on a cluster (`service_key`), so they live with shard 0: a node that goes
down pauses the shards it serves and nothing else, unless it serves shard 0.

Not handled: a failover to a replica, which moves a node's slots to another address. The
routers follow it (RedisCluster), but the plain clients a process made stay on the old
address and fail (MOVED) until the process is restarted.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
from django.conf import settings
from redis.exceptions import RedisClusterException

from engine.relay import GUARDED_PUSH, PUSH, STAMP, TAKE
from engine.stores.redis_connect import connect, split_cluster_options
from xumpweb import redis_topology
from xumpweb.live.lean_redis import LeanRedis

# the relay's Lua scripts the live processes run on the lean client (by SHA1)
LIVE_SCRIPTS = (GUARDED_PUSH, PUSH, TAKE, STAMP)
_lookup: Any = None  # a sync cluster client, to find which node serves a slot
# per event loop, per store: the outbox readers' shared lean client (shared_lean)
_shared_lean: weakref.WeakKeyDictionary[Any, dict[str, LeanRedis]] = weakref.WeakKeyDictionary()


def clustered() -> bool:
    """Whether the service's stores are on a Redis Cluster (XUMP_REDIS_CLUSTER)."""
    return bool(settings.XUMP_REDIS_CLUSTER)


def store_url() -> str:
    """The URL a Redis store of the service is opened with (see the module doc)."""
    if not settings.XUMP_REDIS_CLUSTER:
        return settings.XUMP_REDIS_URL
    return redis_topology.with_cluster_flag(settings.XUMP_REDIS_URL)


def for_store(store: str, **options: Any) -> aioredis.Redis:
    """An asyncio client of the server that holds store `store`'s keys (`options`:
    redis-py's, e.g. socket_timeout)."""
    return aioredis.Redis.from_url(node_url(store_url(), store), **options)


def lean_for_store(store: str) -> LeanRedis:
    """The live path's lean client (xumpweb/live/lean_redis.py) of the server that holds
    store `store`'s keys, with the relay's scripts the live path runs: no time limit, as
    `for_store`'s clients."""
    return LeanRedis(node_url(store_url(), store), timeout=None, scripts=LIVE_SCRIPTS)


def shared_lean(store: str) -> LeanRedis:
    """The running event loop's lean client of store `store`'s server, which every outbox
    reader of the process sends its takes, stamps and acks on (pipelined on one
    connection: none of them blocks); their claims wait on connections of their own."""
    clients = _shared_lean.setdefault(asyncio.get_running_loop(), {})
    client = clients.get(store)
    if client is None:
        client = clients[store] = lean_for_store(store)
    return client


def lean_service(timeout: float | None = 5.0) -> LeanRedis:
    """A lean client of the server of the service-wide keys (`service_key`): the store
    URL's server, or on a cluster the node that serves shard 0's slot."""
    return LeanRedis(node_url(store_url(), settings.XUMP_STORE), timeout=timeout)


def _forget_lookup() -> None:
    global _lookup
    if _lookup is not None:
        _lookup.close()
        _lookup = None


def general(**options: Any) -> aioredis.Redis | aiocluster.RedisCluster:
    """An asyncio client for keys of any shard (on a cluster, started from the URL's node
    and those its `nodes=` lists; no I/O until its first command)."""
    if not settings.XUMP_REDIS_CLUSTER:
        return aioredis.Redis.from_url(settings.XUMP_REDIS_URL, **options)
    plain, _, nodes = split_cluster_options(store_url())
    parts = urlsplit(plain)
    startup = [aiocluster.ClusterNode(node.host, node.port) for node in nodes]
    return aiocluster.RedisCluster.from_url(
        urlunsplit(parts._replace(path="")), startup_nodes=startup or None, **options
    )


def get_many(client: Any, keys: list[str]) -> Any:
    """The values of `keys` (sync or asyncio, by the client): MGET on one server; on a
    cluster, whose MGET refuses keys of several slots, one GET per key (redis-py pipelines
    them by node)."""
    if isinstance(client, redis.RedisCluster | aiocluster.RedisCluster):
        return client.mget_nonatomic(keys)
    return client.mget(keys)


def service_key(name: str) -> str:
    """A service-wide key: with shard 0's hash tag on a cluster (see the module doc),
    as it always was on one server."""
    if not settings.XUMP_REDIS_CLUSTER:
        return f"xump:{name}"
    return f"xump:{{{settings.XUMP_STORE}}}:{name}"


def general_sync(**options: Any) -> redis.Redis | redis.RedisCluster:
    """A sync client for keys of any shard."""
    return connect(store_url(), check=False, **options)[0]


def node_url(url: str, store: str) -> str:
    """`url` itself, or when it is a cluster's (cluster=true) the plain URL of the node
    that serves store `store`'s slot now."""
    plain, cluster, _ = split_cluster_options(url)
    if not cluster:
        return url
    global _lookup
    if _lookup is None:
        _lookup, _ = connect(url, socket_timeout=5, socket_connect_timeout=5)
    try:
        node = _lookup.get_node_from_key(f"xump:{{{store}}}:inbox")
    except (redis.RedisError, RedisClusterException):
        _forget_lookup()
        raise
    parts = urlsplit(plain)
    auth = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{auth}@" * bool(auth) + f"{node.host}:{node.port}"))


def general_for(url: str, client: redis.Redis) -> redis.Redis | redis.RedisCluster:
    """A sync client for keys of every shard of the service at `url`: `client` (one
    server's) itself, or a cluster client when `url` is a cluster's."""
    if not split_cluster_options(url)[1]:
        return client
    return connect(url, socket_timeout=10, socket_connect_timeout=5)[0]
