"""Engines for the engine tests. Tests take their engine only from these fixtures, so the
same tests can run against every store."""

from __future__ import annotations

import pytest

from engine import Engine


@pytest.fixture
def eng() -> Engine:
    return Engine()


@pytest.fixture
def eng_dlq() -> Engine:
    """An engine whose unknown-queue publishes go to "$dead"."""
    return Engine(dead_letter="$dead")


@pytest.fixture
def refused():
    """`refused(engine, Error, call, *args)`: the call raises Error with a message and the
    engine is exactly as it was before."""

    def check(engine: Engine, error, call, *args, match: str | None = None, **kwargs):
        before = snapshot(engine)
        with pytest.raises(error, match=match) as raised:
            call(*args, **kwargs)
        assert snapshot(engine) == before
        assert str(raised.value)
        return raised.value

    return check


def snapshot(engine: Engine) -> tuple:
    """Everything a user can observe of an engine's wiring and counts, to assert that a
    refused call changed nothing."""
    queues = engine.queues()
    return (
        queues,
        {q.name: engine.stats(q.name) for q in queues},
        {
            q.name: [
                (s.id, s.when, s.action, s.target, s.enabled, s.available_credit, s.start)
                for s in engine.selectors(q.name)
            ]
            for q in queues
        },
    )
