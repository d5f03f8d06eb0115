"""A finished run's result as the run page shows it: chart data for uPlot (aligned arrays,
times in seconds) and rows for the tables beside the charts.

Charts are plain data here; static/analytics/charts.js draws them. A table under each
chart carries the same numbers, so nothing is only in a picture.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from xumpweb.analytics.models import AnalyticsRun


def view_of(run: AnalyticsRun) -> dict[str, Any]:
    """What the run page shows of `run`'s result (empty until it is done)."""
    result = run.result if isinstance(run.result, dict) else {}
    if run.status != "done" or not result:
        return {"total": None}
    if run.kind == "report":
        return report_view(result)
    if run.kind == "backtest":
        return backtest_view(result)
    return {"total": None, "result": result, "pairs": result_pairs(result)}


LABELS = {
    "events": "Journal events written",
    "events_read": "Journal events read",
    "events_lost": "Journal events lost before",
    "history": "History messages written, per queue",
    "history_total": "History messages written",
    "path": "Archive directory",
    "published": "Messages published",
    "queue": "Into queue",
    "backtest": "Backtest",
    "rate": "Messages per second",
}


def shown_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "-"}[value]
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list):
        return ", ".join(shown_value(v) for v in value) or "-"
    return str(value)


def result_pairs(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A result that has no page of its own (an archive, a replay) as labelled values; a
    mapping inside it (the history written per queue) as rows of its own."""
    pairs = []
    for key, value in result.items():
        label = LABELS.get(key, key.replace("_", " ").capitalize())
        if isinstance(value, dict):
            rows = [{"name": str(k), "value": shown_value(v)} for k, v in value.items()]
            pairs.append({"label": label, "rows": rows, "value": "" if rows else "none"})
        else:
            pairs.append({"label": label, "rows": None, "value": shown_value(value)})
    return pairs


def _seconds(text: Any) -> float | None:
    """Seconds since the epoch from a number or an ISO time ("...Z" included)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    if isinstance(text, str) and text:
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def time_series(
    rows: list[dict[str, Any]], time_key: str, group_key: str, value_key: str, step: int
) -> dict[str, Any]:
    """Rows of (time, group, value) as one uPlot line chart: a series per group; `step`
    is the seconds each time stands for (the x range of a chart with one time)."""
    times = sorted({t for row in rows if (t := _seconds(row.get(time_key))) is not None})
    at = {t: i for i, t in enumerate(times)}
    groups: dict[str, list[float]] = {}
    for row in rows:
        t = _seconds(row.get(time_key))
        if t is None:
            continue
        values = groups.setdefault(str(row.get(group_key)), [0] * len(times))
        values[at[t]] += row.get(value_key) or 0
    return {
        "type": "lines",
        "step": step,
        "x": times,
        "series": [{"label": name, "values": values} for name, values in sorted(groups.items())],
    }


def bars(categories: list[str], series: dict[str, list[float | None]]) -> dict[str, Any]:
    """One uPlot bar chart: a group of bars per category, one bar per series."""
    return {
        "type": "bars",
        "categories": categories,
        "x": list(range(len(categories))),
        "series": [{"label": name, "values": values} for name, values in series.items()],
    }


def backtest_view(result: dict[str, Any]) -> dict[str, Any]:
    by_hour = result.get("by_hour") or []
    return {
        "total": result.get("taken"),
        "examined": result.get("examined"),
        "when": result.get("when"),
        "by_queue": result.get("by_queue") or [],
        "by_hour": by_hour,
        "samples": result.get("samples") or [],
        "charts": [
            {
                "id": "taken-per-hour",
                "title": "Messages taken per hour, per queue",
                "data": time_series(by_hour, "hour", "queue", "taken", 3600),
            }
        ]
        if by_hour
        else [],
    }


COUNTS = ("published", "delivered", "confirmed", "rejected", "dead_lettered")


def report_view(result: dict[str, Any]) -> dict[str, Any]:
    """The traffic report's summary (engine/pipeline/traffic.py) as charts and tables."""
    queues = [q for q in result.get("queues") or [] if isinstance(q, dict)]
    per_queue = [{"queue": q.get("queue"), **{k: q.get(k, 0) for k in COUNTS}} for q in queues]
    per_minute = [
        {"minute": point.get("minute"), "queue": q.get("queue"),
         **{k: point.get(k, 0) for k in COUNTS}}
        for q in queues
        for point in q.get("series") or []
    ]  # fmt: skip
    latency = [
        {"queue": q.get("queue"), "confirmed": q["latency"].get("confirmed"),
         **{f"{k} (ms)": milliseconds(q["latency"].get(k)) for k in LATENCY_SECONDS}}
        for q in queues
        if isinstance(q.get("latency"), dict)
    ]  # fmt: skip
    reasons = [
        {"queue": q.get("queue"), "reason": reason, "dead_lettered": count}
        for q in queues
        for reason, count in sorted((q.get("dead_letter_reasons") or {}).items())
    ]
    charts = []
    if per_minute:
        charts.append({
            "id": "published-per-minute",
            "title": "Messages published per minute, per queue",
            "data": time_series(per_minute, "minute", "queue", "published", 60),
        })  # fmt: skip
    if latency:
        names = [str(row["queue"]) for row in latency]
        percentiles = {p: [row.get(f"{p} (ms)") for row in latency] for p in ("p99", "p90", "p50")}
        charts.append({
            "id": "latency",
            "title": "Publish-to-confirm latency per queue (milliseconds): p99, p90, p50",
            "data": bars(names, percentiles),
        })  # fmt: skip
    if reasons:
        labels = [f"{row['queue']}: {row['reason']}" for row in reasons]
        charts.append({
            "id": "dead-letter-reasons",
            "title": "Dead letters by queue and reason",
            "data": bars(labels, {"dead letters": [row["dead_lettered"] for row in reasons]}),
        })  # fmt: skip
    totals = result.get("totals") or {}
    return {
        "total": totals.get("published"),
        "totals": [{"name": k.replace("_", " "), "value": totals.get(k, 0)} for k in COUNTS],
        "per_queue": per_queue,
        "per_minute": per_minute,
        "latency": latency,
        "reasons": reasons,
        "top_addresses": result.get("top_addresses") or [],
        "truncated": bool(result.get("series_truncated")),
        "charts": charts,
    }


LATENCY_SECONDS = ("p50", "p90", "p99", "mean")


def milliseconds(seconds: Any) -> float | None:
    """Seconds as milliseconds to a tenth (what a table shows, not 17 digits of a float)."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return None
    return round(seconds * 1000, 1)


def moment(value: Any) -> str:
    """A time (seconds or ISO text) as the console shows it, UTC to the minute."""
    seconds = _seconds(value)
    if seconds is None:
        return "" if value is None else str(value)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M")
