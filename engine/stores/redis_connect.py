"""How a Redis store reaches its data: one Redis server, or a Redis Cluster.

A store's URL is redis-py's (redis://, rediss://, unix://) with one addition: `cluster=true`
in its query names any node of a Redis Cluster, opened with redis-py's RedisCluster, which
learns the other nodes from it (`nodes=host:port,...` names more to start from, for when
that one is down). Every key of a store carries the store's hash tag `{S}`
(redis.py), so all of them hash to one slot and one node serves the whole store: each Lua
script runs there whole, and a pipeline of one store's commands goes to that one node. Shards
are several stores, whose tags spread over the cluster's slots and so over its nodes.

Rules kept here: a plain URL that reaches a cluster node is refused (a plain client would
be answered MOVED for every slot that node does not serve); a cluster has database 0 only.
"""

from __future__ import annotations

from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException

from engine.errors import StoreError
from engine.stores.sql import mask_password

CLUSTER_FLAG = "cluster"
NODES = "nodes"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")

Client = redis.Redis | RedisCluster


def unsplit(parts: SplitResult) -> str:
    """`urlunsplit`, except that a unix:// URL keeps its two slashes: urlunsplit writes
    `unix:/path`, which redis-py does not read as a URL."""
    url = urlunsplit(parts)
    if parts.scheme == "unix" and not parts.netloc and not url.startswith("unix://"):
        url = "unix://" + url.removeprefix("unix:")
    return url


def split_cluster_options(url: str) -> tuple[str, bool, list[ClusterNode]]:
    """The URL without its `cluster=` and `nodes=` query items, whether `cluster` said true,
    and the nodes `nodes` named (host:port, comma-separated): more to start from when the
    URL's own node is down."""
    parts = urlsplit(url)
    items = parse_qsl(parts.query, keep_blank_values=True)
    flags = [value.strip().lower() for name, value in items if name == CLUSTER_FLAG]
    listed = [value for name, value in items if name == NODES]
    if not flags and not listed:
        return url, False, []
    if flags and flags[-1] not in _TRUE + _FALSE:
        raise StoreError(
            f"cluster={flags[-1]!r} in the Redis URL {mask_password(url)} must be true or false"
        )
    cluster = bool(flags) and flags[-1] in _TRUE
    nodes: list[ClusterNode] = []
    for address in ",".join(listed).split(",") if listed else ():
        host, colon, port = address.strip().rpartition(":")
        if not (colon and host and port.isdigit()):
            raise StoreError(
                f"nodes= in the Redis URL {mask_password(url)} must list host:port items "
                f"separated by commas, not {address.strip()!r}"
            )
        nodes.append(ClusterNode(host, int(port)))
    if nodes and not cluster:
        raise StoreError(f"nodes= in the Redis URL {mask_password(url)} needs cluster=true")
    query = urlencode([(name, value) for name, value in items if name not in (CLUSTER_FLAG, NODES)])
    return unsplit(parts._replace(query=query)), cluster, nodes


def connect(url: str, check: bool = True, **options: object) -> tuple[Client, bool]:
    """A client for `url` (`options`: redis-py's, e.g. socket_timeout), and whether it is a
    cluster's. Raises StoreError with what to change when the URL and the server disagree;
    redis.RedisError when the server does not answer. `check=False`: a plain URL's client
    is made without a round trip (nor the check that the server is no cluster node: for a
    process whose start checked it, and that must start while Redis is away)."""
    plain, cluster, nodes = split_cluster_options(url)
    if not cluster:
        client = redis.Redis.from_url(plain, **options)  # type: ignore[arg-type]
        if check and cluster_enabled(client):
            client.close()
            raise StoreError(
                f"the Redis server at {mask_password(url)} is a node of a Redis Cluster: "
                f"add {CLUSTER_FLAG}=true to the URL's query to open it as one"
            )
        return client, False
    parts = urlsplit(plain)
    if parts.path.strip("/") not in ("", "0"):
        raise StoreError(
            f"a Redis Cluster has database 0 only, not {parts.path.strip('/')!r} "
            f"({mask_password(url)})"
        )
    try:
        return RedisCluster(
            url=urlunsplit(parts._replace(path="")),
            startup_nodes=nodes,
            **options,  # type: ignore[arg-type]
        ), True
    except RedisClusterException as error:  # not a RedisError: no node answers, slots missing
        raise redis.ConnectionError(str(error)) from None


def cluster_enabled(client: redis.Redis) -> bool:
    """Whether the server is a cluster node (False when INFO is refused: managed Redis)."""
    try:
        return bool(client.info("cluster").get("cluster_enabled"))
    except redis.ResponseError:
        return False


def node_client(client: Client, key: str) -> redis.Redis:
    """The client of the one server that holds `key` (the client itself off a cluster)."""
    if isinstance(client, RedisCluster):
        return client.get_node_from_key(key).redis_connection  # type: ignore[return-value]
    return client


def one_slot(script: str, client: Client, key: str) -> str:
    """The Lua script as a cluster should run it on the node that holds `key`: with a
    `#!lua` first line (Redis 7 and later), the server refuses any key of the script,
    declared or not, outside the slot of its declared keys. Without it a key of another
    slot that the same node serves goes through, and breaks only once that slot moves to
    another node. Only that node is asked: another node may be down (its shards pause)."""
    if not isinstance(client, RedisCluster):
        return script
    version = node_client(client, key).info("server")["redis_version"]
    if int(str(version).split(".")[0]) >= 7:
        return "#!lua\n" + script
    return script


# answers that say the slot moved, or is moving, to another node: a cluster client's
# generic path follows them (and learns the new slot map) where a node's own client cannot
REDIRECTIONS = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)
