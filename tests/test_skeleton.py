"""The project's doors: Django configuration is sound and the engine stays pure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_django_check_passes() -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_engine_imports_nothing_from_django_or_the_web_service() -> None:
    code = (
        "import sys, engine, engine.patterns, engine.filters\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'xumpweb', 'celery', 'channels'))\n"
        "print(bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
