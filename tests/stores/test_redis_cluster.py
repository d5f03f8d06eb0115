"""The Redis store on a real Redis Cluster (tests/conftest.py: three nodes, no replicas, AOF
with fsync on every write): shards are stores whose hash tags land on different nodes."""

from __future__ import annotations

import redis


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
