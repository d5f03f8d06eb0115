"""docs/lifetime.md's worked example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "lifetime.md"


def test_the_retry_queue_example_runs() -> None:
    [block] = re.findall(
        r"```python\n(.*?)```", DOC.read_text().split("## Worked example")[1], re.S
    )
    namespace: dict = {}
    exec(block, namespace)
    assert namespace["eng"].stats("emails")["delivery_limited"] == 1
