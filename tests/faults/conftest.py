"""Fault suites run against the service as users meet it: the fixtures of tests/web."""

from __future__ import annotations

import pytest

from tests.web.conftest import start_service

MAX_BODY = 1024 * 1024  # the service's default XUMP_MAX_BODY, set explicitly here


@pytest.fixture(scope="module")
def poison_service(redis_server, tmp_path_factory):
    """The service routing inline, its body limit set to MAX_BODY."""
    running = start_service(
        redis_server.url, tmp_path_factory.mktemp("poison"), "inline",
        XUMP_MAX_BODY=str(MAX_BODY),
    )  # fmt: skip
    yield running
    running.close()
