"""How the lease watches of the routing workers share the shards (xumpweb/router/watch.py,
SPEC §10): every shard has a worker's share, and no live worker is left without one while
there are shards enough."""

from __future__ import annotations

import pytest

from xumpweb.router.watch import share


@pytest.mark.parametrize("shards", [1, 2, 3, 4, 5, 7, 8, 16])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
def test_the_shares_add_up_to_every_shard_and_differ_by_one_at_most(shards, count) -> None:
    workers = [f"node{n}:{n * 7919}" for n in range(count)]
    shares = [share(shards, workers, me) for me in workers]
    assert sum(shares) == shards
    assert max(shares) - min(shares) <= 1
    if shards >= count:
        assert min(shares) >= 1  # a worker that joined gets a shard


def test_four_shards_over_three_workers_are_two_one_one() -> None:
    """ceil(4/3) each gave the first two workers 2 shards and the third none."""
    workers = ["a", "b", "c"]
    assert [share(4, workers, me) for me in workers] == [2, 1, 1]


def test_a_worker_not_yet_marked_counts_itself() -> None:
    """Its first look reads the set in the same round trip that writes its mark."""
    assert share(4, ["a"], "b") == 2
    assert share(4, [], "a") == 4
