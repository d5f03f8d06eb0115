"""Fixtures for the pipeline tests: one real SparkSession (local[2]) for the whole session,
and archives made through the real engine with its journal on."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """The pipeline's own SparkSession, local[2]; the jobs under test find it running."""
    from engine.pipeline.spark import session

    spark = session("local[2]")
    yield spark
    spark.stop()
