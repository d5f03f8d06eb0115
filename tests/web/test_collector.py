"""The collector settings of the processes that carry messages (xumpweb/collector.py)."""

from __future__ import annotations

import subprocess

from tests.web.conftest import PYTHON, ROOT

SETTLED = """
import gc
from xumpweb import collector
collector.settle()
print(gc.get_threshold()[0], gc.get_freeze_count() > 0)
"""


def test_settle_freezes_start_up_and_raises_the_young_threshold() -> None:
    # in a process of its own: this one's collector stays as pytest has it
    done = subprocess.run([PYTHON, "-c", SETTLED], cwd=ROOT, capture_output=True, text=True,
                          check=True, timeout=60)  # fmt: skip
    assert done.stdout.split() == ["20000", "True"]


def test_a_ready_worker_settles_its_collector_before_it_routes(monkeypatch) -> None:
    from xumpweb import celery, collector
    from xumpweb.router import watch

    calls: list[str] = []
    monkeypatch.setattr(collector, "settle", lambda: calls.append("settle"))
    monkeypatch.setattr(watch, "start", lambda node=None: calls.append(f"watch {node}"))
    celery.watch_the_lease(sender=type("Worker", (), {"hostname": "w1"})())
    assert calls == ["settle", "watch w1"]
