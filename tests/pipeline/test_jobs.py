"""The traffic report, the backtest and the replay selection, run for real on local[2] over
archives the engine wrote: exact counts."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pyarrow.parquet as pq
import pytest

from engine import Engine, Message
from engine.archive import export_engine
from engine.errors import InvalidArgument, InvalidSelector
from engine.pipeline import backtest, replay, traffic


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """orders: 14 published (7 order.a, 3 order.b, 4 junk), 10 delivered, 6 confirmed,
    4 rejected into dlq, 4 unroutable into dlq; audit: 5 published with headers."""
    eng = Engine(journal=True)
    eng.queue_create("dlq", history=100)
    eng.selector_create("dlq").when_always().do_delete().enable()
    eng.queue_create("orders", history=100, dead_letter="dlq")
    eng.selector_create("orders").when_match("topic", "order.#").do_deliver("app").set_credit(
        100
    ).enable()
    deliveries = []
    for address in ["order.a"] * 7 + ["order.b"] * 3 + ["junk"] * 4:
        deliveries += eng.publish("orders", Message(address=address))
    time.sleep(0.05)
    for delivery in deliveries[:6]:
        eng.confirm(delivery)
    for delivery in deliveries[6:]:
        eng.reject(delivery, requeue=False)
    eng.queue_create("audit", history=100)
    eng.selector_create("audit").when_always().do_delete().enable()
    for n in range(5):
        headers = {"n": n, "kind": "even" if n % 2 == 0 else "odd"}
        eng.publish("audit", Message(address=f"audit.{n}", headers=headers, body=b"%d" % n))
    path = tmp_path_factory.mktemp("archive")
    export_engine(eng, path)
    return path, eng


def test_traffic_counts_per_queue_with_dead_letter_reasons_and_latency(spark, archive, tmp_path):
    path, _ = archive
    stages = []
    summary = traffic.run(str(path), str(tmp_path), progress=stages.append)
    orders = next(q for q in summary["queues"] if q["queue"] == "orders")
    assert {k: orders[k] for k in traffic.COUNTED} == {
        "published": 14,
        "delivered": 10,
        "confirmed": 6,
        "rejected": 4,
        "dead_lettered": 8,
    }
    assert orders["dead_letter_reasons"] == {"rejected": 4, "unroutable": 4}
    latency = orders["latency"]
    assert latency["confirmed"] == 6
    assert 0.05 <= latency["p50"] <= latency["p90"] <= latency["p99"] < 5
    audit = next(q for q in summary["queues"] if q["queue"] == "audit")
    assert (audit["published"], audit["dead_lettered"], audit["latency"]) == (5, 0, None)
    assert summary["top_addresses"][:2] == [
        {"address": "order.a", "published": 7},
        {"address": "junk", "published": 4},
    ]
    assert sum(point["published"] for point in orders["series"]) == 14
    assert json.loads((tmp_path / "summary.json").read_text())["totals"] == summary["totals"]
    rows = pq.read_table(tmp_path / "by_minute").to_pylist()
    assert sum(r["delivered"] for r in rows if r["queue"] == "orders" and r["selector"] == 1) == 10
    assert {r["reason"]: r["dead_lettered"] for r in pq.read_table(tmp_path / "dead_letters")
            .to_pylist() if r["queue"] == "orders"} == {"rejected": 4, "unroutable": 4}  # fmt: skip
    assert stages[0] == "starting Spark" and stages[-1] == "done"


def test_traffic_window_and_queue_choice_leave_the_rest_out(spark, archive, tmp_path):
    path, _ = archive
    summary = traffic.run(str(path), str(tmp_path / "a"), queues=["audit"])
    assert [q["queue"] for q in summary["queues"]] == ["audit"]
    future = time.time() + 3600
    empty = traffic.run(str(path), str(tmp_path / "b"), since=future)
    assert empty["queues"] == [] and empty["totals"]["published"] == 0


def test_backtest_counts_what_a_when_would_take_per_queue_and_hour(spark, archive, tmp_path):
    path, eng = archive
    summary = backtest.run(str(path), str(tmp_path), "topic", "order.*")
    by_queue = {q["queue"]: (q["examined"], q["taken"]) for q in summary["by_queue"]}
    # orders' history holds the 6 confirmed (rejected ones never reach it); dlq's the 8 dead
    # letters, 4 of them order.*
    assert by_queue == {"orders": (6, 6), "dlq": (8, 4), "audit": (5, 0)}
    assert summary["taken"] == 10 and summary["examined"] == 19
    taken = [m for q in ("orders", "dlq") for m in eng.browse(q, start="oldest", count=100)]
    taken = [m for m in taken if m.address.startswith("order.")]
    hours = {}
    for m in taken:
        hour = datetime.fromtimestamp(m.timestamp, UTC).strftime("%Y-%m-%dT%H:00:00Z")
        hours[hour] = hours.get(hour, 0) + 1
    got = {}
    for row in summary["by_hour"]:
        got[row["hour"]] = got.get(row["hour"], 0) + row["taken"]
    assert got == hours
    assert len(summary["samples"]) == 10 and set(summary["samples"]) <= {m.mid for m in taken}


def test_backtest_combines_a_match_with_a_filter(spark, archive, tmp_path):
    path, _ = archive
    summary = backtest.run(str(path), str(tmp_path), "prefix", "audit.", "n >= 2 AND kind = 'even'")
    assert summary["taken"] == 2  # n = 2 and n = 4
    only_filter = backtest.run(str(path), str(tmp_path), filter="n IS NULL", queues=["audit"])
    assert only_filter["taken"] == 0 and only_filter["examined"] == 5


def test_a_bad_expression_raises_the_engines_error_with_its_column_before_spark(tmp_path):
    with pytest.raises(InvalidSelector) as error:
        backtest.run(str(tmp_path), str(tmp_path / "out"), filter="price > 'x' AND")
    assert error.value.column is not None
    with pytest.raises(InvalidSelector):
        backtest.run(str(tmp_path), str(tmp_path / "out"), "regex", "(unclosed")
    with pytest.raises(InvalidSelector):
        replay.select(str(tmp_path), str(tmp_path / "out"), "topic")  # no pattern
    with pytest.raises(InvalidArgument):
        traffic.run(str(tmp_path / "missing"), str(tmp_path / "out"))
    with pytest.raises(InvalidArgument):
        traffic.run(str(tmp_path), str(tmp_path / "out"), since=10, until=5)
    assert not (tmp_path / "out").exists()


def test_replay_selects_then_reads_messages_back_in_batches(spark, archive, tmp_path):
    path, eng = archive
    selected = replay.select(str(path), str(tmp_path), filter="kind = 'odd'", queues=["audit"])
    batches = list(replay.read_batches(selected, 1))
    assert [len(b) for b in batches] == [1, 1]
    messages = [m for batch in batches for m in batch]
    assert [(m.address, dict(m.headers), m.body) for m in messages] == [
        ("audit.1", {"n": 1, "kind": "odd"}, b"1"),
        ("audit.3", {"n": 3, "kind": "odd"}, b"3"),
    ]
    # published again into a queue of the engine, they are new messages there
    eng.queue_create("backfill", history=10)
    eng.selector_create("backfill").when_always().do_delete().enable()
    for batch in replay.read_batches(selected, 10):
        eng.publish_many("backfill", batch)
    copies = eng.browse("backfill", start="oldest")
    assert [m.address for m in copies] == ["audit.1", "audit.3"]
    with pytest.raises(InvalidArgument):
        next(replay.read_batches(selected, 0))


def test_jobs_run_from_the_command_line(spark, archive, tmp_path, capsys):
    path, _ = archive
    code = backtest.main(["--archive", str(path), "--out", str(tmp_path), "--filter", "n > 2"])
    assert code == 0
    assert "2 of 19 messages taken" in capsys.readouterr().out
    assert backtest.main(["--archive", str(path), "--out", str(tmp_path), "--filter", "n >"]) == 2
    assert "column" in capsys.readouterr().err  # where the expression went wrong
    assert traffic.main(["--archive", str(path), "--out", str(tmp_path), "--queue", "orders"]) == 0
    assert "14 published" in capsys.readouterr().out


def test_replay_selection_runs_from_the_command_line(spark, archive, tmp_path, capsys):
    path, _ = archive
    argv = ["--archive", str(path), "--out", str(tmp_path), "--match", "prefix"]
    assert replay.main([*argv, "--pattern", "audit.", "--filter", "n < 3"]) == 0
    assert "3 messages selected" in capsys.readouterr().out
    assert replay.main([*argv, "--pattern", "audit.", "--filter", "n <"]) == 2


def test_traffic_counts_the_lifetime_reasons_expired_and_delivery_limit(spark, tmp_path):
    """SPEC 8's dead-letter reasons reach the report like the others: 3 messages expired
    by their ttl while nobody took them, 2 poison messages stopped at max_deliveries 2."""
    eng = Engine(journal=True)
    eng.queue_create("dlq", history=100)
    eng.selector_create("dlq").when_always().do_delete().enable()
    eng.queue_create("waiting", dead_letter="dlq")
    eng.selector_create("waiting").when_always().do_deliver("nobody").set_credit(0).enable()
    started = time.time()
    for n in range(3):
        eng.publish("waiting", Message(address=f"w.{n}", ttl=1))
    eng.tick(started + 5)
    eng.queue_create("work", dead_letter="dlq", max_deliveries=2)
    eng.selector_create("work").when_always().do_deliver("app").enable()
    deliveries = [d for n in range(2) for d in eng.publish("work", Message(address=f"p.{n}"))]
    while deliveries:  # reject each until the delivery limit stops it
        deliveries = [again for d in deliveries for again in eng.reject(d, requeue=True)]
    export_engine(eng, tmp_path / "archive")
    summary = traffic.run(str(tmp_path / "archive"), str(tmp_path / "out"))
    reasons = {q["queue"]: q["dead_letter_reasons"] for q in summary["queues"]}
    assert reasons["waiting"] == {"expired": 3}
    assert reasons["work"] == {"delivery-limit": 2}
