"""Placement (SPEC §10, engine/placement.py): which shard a new queue lives in."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from engine import Engine
from engine.errors import InvalidArgument, NotFound
from engine.placement import place, shard_by_hash

ROOT = Path(__file__).resolve().parents[2]
SHARDS = ["s1", "s2", "s3", "s4"]


def test_an_explicit_store_wins_over_every_rule() -> None:
    assert place("orders:retry", SHARDS, explicit="elsewhere", store_of=lambda q: "s1") == (
        "elsewhere"
    )
    assert place("orders", SHARDS, explicit="s3") == "s3"


def test_a_name_with_a_colon_lives_with_the_queue_named_before_the_first_colon() -> None:
    where = {"orders": "s3"}
    for name in ("orders:retry", "orders:a:b:c", "orders:", "orders::::"):
        assert place(name, SHARDS, store_of=where.get) == "s3"


def test_a_private_queue_created_before_its_owner_goes_where_the_owner_will() -> None:
    owner = place("orders", SHARDS)
    assert place("orders:retry", SHARDS) == owner


def test_other_names_are_placed_by_a_stable_hash_the_same_in_every_process() -> None:
    names = [f"queue-{n}" for n in range(50)]
    here = [place(name, SHARDS) for name in names]
    code = (
        "import sys; from engine.placement import place; "
        f"print(' '.join(place(n, {SHARDS!r}) for n in {names!r}))"
    )
    # another interpreter, another PYTHONHASHSEED: Python's own hash() would differ
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""}, cwd=ROOT,
    ).stdout.split()  # fmt: skip
    assert here == there


def test_the_hash_spreads_names_over_every_shard() -> None:
    counts = Counter(shard_by_hash(f"q{n}", SHARDS) for n in range(4000))
    assert set(counts) == set(SHARDS)
    assert min(counts.values()) > 800  # 1000 each on average


@pytest.mark.parametrize(
    "name",
    [
        "",  # the engine refuses it before placement; placement itself still answers
        ":",
        ":leading",
        "::",
        "a" * 100_000,
        ":" * 1000,
        "x" + ":" * 1000,
        "\ud800",  # a lone surrogate: not encodable as plain UTF-8
        "\udfff:tail",
        "owner\ud83d:x",
        "ünïcødé:ключ:名字",
        "\x00\x1f",
    ],
)
def test_hostile_names_are_placed_on_one_of_the_shards(name: str) -> None:
    placed = place(name, SHARDS)
    assert placed in SHARDS
    assert place(name, SHARDS) == placed


def test_a_leading_colon_names_no_owner_so_the_whole_name_is_hashed() -> None:
    assert place(":x", SHARDS, store_of=lambda q: "s1") == shard_by_hash(":x", SHARDS)


def test_an_owner_with_a_surrogate_is_followed_like_any_other() -> None:
    where = {"\ud800": "s2"}
    assert place("\ud800:private", SHARDS, store_of=where.get) == "s2"


def test_placement_without_shards_is_refused_with_a_clear_error() -> None:
    with pytest.raises(InvalidArgument, match="at least one shard"):
        place("orders", [])


def test_one_shard_places_everything_on_it() -> None:
    assert {place(f"q{n}:x", ["main"]) for n in range(100)} == {"main"}


def test_the_engine_keeps_each_queue_where_it_was_placed_in_the_wiring() -> None:
    engine = Engine()
    for name in SHARDS:
        engine.store_create("ram", name)
    engine.set_shards(SHARDS)
    engine.queue_create("orders")
    engine.queue_create("orders:retry")
    engine.queue_create("pinned", store="s1")
    stores = {q.name: q.store for q in engine.queues()}
    assert stores["orders:retry"] == stores["orders"] == shard_by_hash("orders", SHARDS)
    assert stores["pinned"] == "s1"
    engine.store_create("ram", "s5")
    engine.set_shards([*SHARDS, "s5"])  # a shard added later: nothing moves
    assert {q.name: q.store for q in engine.queues()} == stores
    placed = {engine.queue_create(f"new{n}").store for n in range(40)}
    assert "s5" in placed


def test_set_shards_refuses_unknown_or_repeated_stores_and_a_shard_cannot_be_deleted() -> None:
    engine = Engine()
    engine.store_create("ram", "s1")
    with pytest.raises(NotFound, match="'nope' does not exist"):
        engine.set_shards(["s1", "nope"])
    with pytest.raises(InvalidArgument, match="distinct"):
        engine.set_shards(["s1", "s1"])
    engine.set_shards(["s1"])
    with pytest.raises(InvalidArgument, match="is a shard"):
        engine.store_delete("s1")
    assert engine.shards() == ["s1"]
