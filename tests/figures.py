"""Figures a test measures and CI should show (counts, latencies): pytest captures what a
passing test prints, so tests hand their lines here and tests/conftest.py prints them in the
terminal summary of every run."""

from __future__ import annotations

SECTIONS: dict[str, list[str]] = {}


def report(title: str, lines: list[str]) -> None:
    """Show `lines` under `title` at the end of the run (a later report replaces it)."""
    SECTIONS[title] = list(lines)
