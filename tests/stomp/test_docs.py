"""docs/stomp.md's protocol-core example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "stomp.md"


def test_the_protocol_core_example_runs() -> None:
    core = DOC.read_text().split("## Protocol core", 1)[1]
    (example,) = re.findall(r"```python\n(.*?)```", core, re.DOTALL)
    exec(compile(example, str(DOC), "exec"), {})
