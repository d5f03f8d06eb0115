"""What XUMP_REDIS_URL reaches, checked once when a process starts (settings.py): a single
Redis server, or with XUMP_REDIS_CLUSTER=true a Redis Cluster that can serve every shard.

Each check answers one line a person can act on, or None. A single server that does not
answer yet is not a problem here: the processes wait for Redis and the console says so
(a restart of Redis must not need a restart of the service). A cluster is different: the
service's shards spread over its slots, so at start it must answer, hold every slot and
have every node that holds slots up; a node that goes down later pauses only its shards.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import redis

from engine.errors import StoreError
from engine.stores.redis_connect import (
    CLUSTER_FLAG,
    NODES,
    cluster_enabled,
    split_cluster_options,
    unsplit,
)
from engine.stores.sql import mask_password

SLOTS = 16384
TIMEOUT = 2.0  # seconds to connect and to answer: a start-up check, not a wait


def with_cluster_flag(url: str) -> str:
    """`url` with `cluster=true` added to its query: how the engine opens a cluster."""
    parts = urlsplit(url)
    query = f"{parts.query}&{CLUSTER_FLAG}=true" if parts.query else f"{CLUSTER_FLAG}=true"
    return unsplit(parts._replace(query=query))


def problem(url: str, cluster: bool) -> str | None:
    """Why the service cannot start on `url` (cluster: XUMP_REDIS_CLUSTER), or None."""
    where = mask_password(url)
    named = {name for name, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)}
    if CLUSTER_FLAG in named:
        return (
            f"XUMP_REDIS_URL {where} carries cluster=true, which is for a store's URL: give "
            "the node's plain URL and set XUMP_REDIS_CLUSTER=true"
        )
    if NODES in named and not cluster:
        return (
            f"XUMP_REDIS_URL {where} lists nodes=, more nodes of a Redis Cluster: set "
            "XUMP_REDIS_CLUSTER=true, or remove it"
        )
    flagged = with_cluster_flag(url)
    try:
        url = split_cluster_options(flagged)[0]  # nodes= are for later
    except StoreError as error:
        return str(error).replace(
            f"in the Redis URL {mask_password(flagged)}", f"in XUMP_REDIS_URL {where}"
        )
    try:
        client = redis.Redis.from_url(url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
        client.connection_pool.make_connection()  # no I/O: checks the URL's options
    except (ValueError, TypeError) as error:
        return f"XUMP_REDIS_URL {where} is not a Redis URL (redis://host:port/db): {error}"
    try:
        try:
            is_node = cluster_enabled(client)
        except redis.RedisError as error:
            if not cluster:
                return None  # the processes wait for it (see the module doc)
            return (
                f"XUMP_REDIS_CLUSTER=true but no Redis Cluster node answers at {where} "
                f"({error}): start the cluster, or point XUMP_REDIS_URL at a node that runs"
            )
        if not cluster:
            if is_node:
                return (
                    f"XUMP_REDIS_URL {where} is a node of a Redis Cluster: set "
                    "XUMP_REDIS_CLUSTER=true, and XUMP_BROKER_URL and XUMP_CHANNELS_URL "
                    "(Celery and Channels cannot use a cluster)"
                )
            return None
        if not is_node:
            return (
                f"XUMP_REDIS_CLUSTER=true but XUMP_REDIS_URL {where} is a single Redis server "
                "(cluster_enabled:0): unset XUMP_REDIS_CLUSTER, or give a cluster node's URL"
            )
        return _cluster_problem(client, url)
    finally:
        client.close()


def _cluster_problem(client: redis.Redis, url: str) -> str | None:
    where = mask_password(url)
    parts = urlsplit(url)
    if parts.path.strip("/") not in ("", "0"):
        return (
            f"XUMP_REDIS_URL {where} names database {parts.path.strip('/')!r}; a Redis Cluster "
            "has database 0 only"
        )
    try:
        nodes = client.cluster("NODES")  # redis-py: {"host:port": {flags, slots, ...}}
        info = client.cluster("INFO")
    except redis.RedisError as error:
        return f"cannot read the Redis Cluster's state from {where}: {error}"
    for address, node in sorted(nodes.items()):
        if "master" not in node.get("flags", "") or not node.get("slots"):
            continue
        down = "fail" in node.get("flags", "") or not _answers(address)
        if down:
            return (
                f"Redis Cluster node {address.split('@')[0]} holds slots but does not answer: "
                "start it (or fail its slots over to a replica) before the service"
            )
    assigned = int(info.get("cluster_slots_assigned", 0))
    if assigned < SLOTS:
        host = f"{parts.hostname}:{parts.port or 6379}"
        return (
            f"the Redis Cluster at {where} serves {assigned} of {SLOTS} slots: assign the "
            f"missing ones (redis-cli --cluster fix {host})"
        )
    if info.get("cluster_state") != "ok":
        return (
            f"the Redis Cluster at {where} reports cluster_state:{info.get('cluster_state')}: "
            "see redis-cli --cluster check"
        )
    return None


def _answers(address: str) -> bool:
    host, _, port = address.split("@")[0].rpartition(":")
    node = redis.Redis(
        host=host, port=int(port), socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT
    )
    try:
        return bool(node.ping())
    except redis.RedisError:
        return False
    finally:
        node.close()
