"""The archive (pyarrow only): history and journal events as partitioned Parquet, written
once however often an export runs."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from engine import Engine, Message
from engine.archive import PARTITION_SCHEMA, Archive, export_engine, headers_of
from engine.errors import InvalidArgument


def read(path: Path, table: str) -> list[dict]:
    partitioning = ds.partitioning(PARTITION_SCHEMA, flavor="hive")
    return ds.dataset(path / table, partitioning=partitioning).to_table().to_pylist()


def engine_with_traffic() -> Engine:
    eng = Engine(journal=True)
    eng.queue_create("orders", history=100)
    eng.queue_create("parrot:bob", history=100)
    eng.selector_create("orders").when_always().do_copy("parrot:bob").enable()
    eng.selector_create("orders").when_always().do_delete().enable()
    eng.selector_create("parrot:bob").when_always().do_delete().enable()
    return eng


def test_export_writes_history_and_events_partitioned_by_date_and_queue(tmp_path):
    eng = engine_with_traffic()
    headers = {"s": "x", "n": 7, "f": 2.5, "ok": True, "huge": 2**64 - 1}  # the door's largest
    eng.publish("orders", Message(address="o.1", headers=headers, body=b"\x00\xff"))
    eng.publish("orders", Message(address="o.2", return_address="back"))
    result = export_engine(eng, tmp_path)
    assert (result.history_rows, result.event_rows) == (4, 8)
    assert all(Path(f).exists() for f in result.files)
    history = sorted(read(tmp_path, "history"), key=lambda r: (r["queue"], r["seq"]))
    assert [(r["queue"], r["seq"], r["address"]) for r in history] == [
        ("orders", 1, "o.1"),
        ("orders", 2, "o.2"),
        ("parrot:bob", 1, "o.1"),
        ("parrot:bob", 2, "o.2"),
    ]
    first = history[0]
    assert headers_of(first) == headers  # every header keeps its kind
    assert type(headers_of(first)["n"]) is int and type(headers_of(first)["ok"]) is bool
    assert first["body"] == b"\x00\xff" and history[1]["return_address"] == "back"
    assert {r["mid"] for r in history[:2]} == {r["mid"] for r in history[2:]}
    assert any((tmp_path / "history").glob("date=*/queue=parrot%3Abob/*.parquet"))
    events = read(tmp_path, "events")
    assert sorted(r["position"] for r in events) == list(range(1, 9))
    assert sorted((r["queue"], r["kind"]) for r in events) == sorted(
        [("orders", "publish"), ("orders", "route"), ("orders", "delete")] * 2
        + [("parrot:bob", "delete")] * 2
    )


def test_exporting_twice_writes_nothing_twice_and_then_only_what_is_new(tmp_path):
    eng = engine_with_traffic()
    for n in range(5):
        eng.publish("orders", Message(address=f"o.{n}"))
    first = export_engine(eng, tmp_path)
    again = export_engine(eng, tmp_path)
    assert (again.history_rows, again.event_rows, again.files) == (0, 0, [])
    assert len(read(tmp_path, "history")) == first.history_rows == 10
    eng.publish("orders", Message(address="o.5"))
    later = export_engine(eng, tmp_path)
    assert (later.history_rows, later.event_rows) == (2, 4)
    history = read(tmp_path, "history")
    assert len(history) == 12
    assert len({(r["queue"], r["seq"]) for r in history}) == 12
    assert Archive(tmp_path).history_watermark("orders") == 6
    assert Archive(tmp_path).history_watermark("never") == 0


@pytest.mark.parametrize("again", [2, 5], ids=["fewer-than-before", "more-than-before"])
def test_a_queue_made_again_under_its_name_is_archived_beside_the_old_one(tmp_path, again):
    eng = engine_with_traffic()
    for n in range(3):
        eng.publish("orders", Message(address=f"old.{n}"))
    export_engine(eng, tmp_path)
    for selector in eng.selectors("orders"):
        eng.selector_delete("orders", selector.id)
    eng.queue_delete("orders")
    eng.queue_create("orders", history=100)  # its seqs start from 1 again
    eng.selector_create("orders").when_always().do_delete().enable()
    for n in range(again):
        eng.publish("orders", Message(address=f"new.{n}"))
    assert export_engine(eng, tmp_path).history_rows == again
    orders = [r for r in read(tmp_path, "history") if r["queue"] == "orders"]
    assert sorted(r["address"] for r in orders) == sorted(
        [f"old.{n}" for n in range(3)] + [f"new.{n}" for n in range(again)]
    )
    assert export_engine(eng, tmp_path).history_rows == 0  # and then nothing twice


def test_the_same_journal_batch_written_twice_is_written_once(tmp_path):
    eng = engine_with_traffic()
    eng.publish("orders", Message(address="a"))
    batch = eng.journal.drain()
    archive = Archive(tmp_path)
    assert archive.write_events(batch) == len(batch) == 4
    assert archive.write_events(batch) == 0
    # the same events as plain tuples, overlapping: only the new ones are written
    eng.publish("orders", Message(address="b"))
    more = eng.journal.drain()
    assert archive.write_events(batch.events + more.events, batch.epoch, batch.first) == 4
    assert sorted(r["position"] for r in read(tmp_path, "events")) == list(range(1, 9))
    assert archive.event_watermark(batch.epoch) == 8


def test_a_run_that_died_before_its_manifest_replaces_its_files_when_run_again(tmp_path):
    eng = engine_with_traffic()
    eng.publish("orders", Message(address="a"))
    export_engine(eng, tmp_path)
    (tmp_path / "manifest.json").unlink()  # as if the process died after the data files
    archive = Archive(tmp_path)
    messages = eng.browse("orders", start="oldest")
    assert archive.write_history("orders", messages) == 1
    assert len(read(tmp_path, "history")) == 2  # orders once, parrot:bob once


def test_progress_counts_queues_then_the_journal(tmp_path):
    eng = engine_with_traffic()
    seen = []
    export_engine(eng, tmp_path, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_bad_input_is_refused_and_writes_nothing(tmp_path):
    archive = Archive(tmp_path / "a")
    with pytest.raises(InvalidArgument):
        archive.write_history("", [])
    with pytest.raises(InvalidArgument):
        archive.write_history("q", [Message(address="no seq")])
    with pytest.raises(InvalidArgument):
        archive.write_events([(1.0, "publish")], "epoch", 1)
    with pytest.raises(InvalidArgument):
        archive.write_events([], None, None)
    with pytest.raises(InvalidArgument):
        archive.write_events([], "epoch", 0)
    with pytest.raises(InvalidArgument):
        Archive("")
    assert not (tmp_path / "a" / "manifest.json").exists()
    assert not (tmp_path / "a" / "history").exists()


def test_messages_of_two_utc_days_go_to_two_date_partitions(tmp_path):
    midnight = 1_795_392_000.0  # 2026-11-23T00:00:00Z
    messages = [
        Message(address="late", mid="m-1", seq=1, timestamp=midnight - 0.5),
        Message(address="early", mid="m-2", seq=2, timestamp=midnight),
    ]
    assert Archive(tmp_path).write_history("q", messages) == 2
    dates = {r["address"]: r["date"] for r in read(tmp_path, "history")}
    assert dates == {"late": "2026-11-22", "early": "2026-11-23"}
