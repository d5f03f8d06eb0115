"""Filter evaluation speed (issue: filter language). Prints figures; asserts nothing.

    python bench/filter_bench.py

Each expression is compiled once and evaluated against a message with 10 headers.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from engine import Message
from engine.filters import compile_filter

SIMPLE = "priority > 5 AND region = 'eu'"
MEDIUM = (
    "symbol IN ('AAPL', 'MSFT', 'GOOG', 'AMZN', 'META', 'TSLA', 'NVDA', 'ORCL', 'IBM', 'INTC', "
    "'CSCO', 'ADBE', 'CRM', 'NFLX', 'PYPL', 'QCOM', 'TXN', 'AVGO', 'AMD', 'SAP') "
    "OR desk LIKE 'fx-%'"
)
COMPLEX = (
    "priority BETWEEN 3 AND 9 AND region IN ('eu', 'us') AND price * quantity > 1000 "
    "AND (discount IS NULL OR discount < 0.5) AND NOT (status = 'cancelled') "
    "AND desk LIKE 'eq\\_%' ESCAPE '\\' AND quantity - reserved >= 10 "
    "AND price / 2 < 500 AND customer <> 'blocked' AND retries < 3"
)

MESSAGE = Message(
    address="orders.eu.new",
    headers={
        "priority": 7,
        "region": "eu",
        "symbol": "ORCL",
        "desk": "eq_london",
        "price": 120.5,
        "quantity": 40,
        "reserved": 5,
        "status": "new",
        "customer": "acme",
        "retries": 0,
    },
)


# the same headers, but the IN list misses, so the LIKE decides
MESSAGE_FX = MESSAGE._replace(headers={**MESSAGE.headers, "symbol": "EURUSD", "desk": "fx-spot"})


def rate(expression: str, message: Message, seconds: float = 2.0) -> tuple[float, bool]:
    selects = compile_filter(expression)
    result = selects(message)
    count = 0
    batch = 10_000
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(batch):
            selects(message)
        count += batch
    return count / (time.perf_counter() - start), result


def main() -> None:
    print(f"Xump filter benchmark, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    for name, expression, message, target in (
        ("simple", SIMPLE, MESSAGE, 1_000_000),
        ("medium", MEDIUM, MESSAGE, None),
        ("medium, IN misses", MEDIUM, MESSAGE_FX, None),
        ("complex", COMPLEX, MESSAGE, 300_000),
    ):
        per_second, result = rate(expression, message)
        goal = f" (target {target:,})" if target else ""
        print(f"{name:>17}: {per_second:>12,.0f} evaluations/s, selects={result}{goal}")


if __name__ == "__main__":
    main()
