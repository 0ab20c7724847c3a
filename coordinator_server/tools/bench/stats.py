"""Counting and summarizing what a benchmark measured, and printing it."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoadResult:
    """What a closed loop saw while it was measuring."""

    latencies: list[float] = field(default_factory=list)
    requests: int = 0
    errors: int = 0
    error_codes: dict[int, int] = field(default_factory=dict)

    def merge(self, other: LoadResult) -> None:
        self.latencies.extend(other.latencies)
        self.requests += other.requests
        self.errors += other.errors
        for code, count in other.error_codes.items():
            self.error_codes[code] = self.error_codes.get(code, 0) + count


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def latency_summary_ms(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "p50_ms": round(percentile(ordered, 0.50) * 1000, 3),
        "p99_ms": round(percentile(ordered, 0.99) * 1000, 3),
        "p999_ms": round(percentile(ordered, 0.999) * 1000, 3),
    }


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric field's median over the repeated runs that have it (other fields from the
    first run that has them), and the request rate of every run (`requests_per_s_runs`). A
    run that served nothing has no CPU per request: the others' still count."""
    if len(rows) == 1:
        return rows[0]
    merged: dict[str, Any] = {}
    for row in rows:
        for key, value in row.items():
            merged.setdefault(key, value)
    for key, value in list(merged.items()):
        if isinstance(value, int | float) and not isinstance(value, bool):
            values = [row[key] for row in rows if isinstance(row.get(key), int | float)]
            median = statistics.median(values)
            merged[key] = round(median, 3) if isinstance(median, float) else median
        elif isinstance(value, dict):
            # A figure per item (each node's CPU share): the median of each.
            merged[key] = median_row([row.get(key) or {} for row in rows])
            merged[key].pop("runs", None)
    if isinstance(rows[0].get("requests_per_s"), int | float):
        # The median hides how far the runs were apart: the rate of each, in the JSON.
        merged["requests_per_s_runs"] = [row.get("requests_per_s") for row in rows]
    merged["runs"] = len(rows)
    return merged


# What a row is of, copied into its ratio row: requests in flight, members, the shape of a
# transaction.
ROW_KEYS = ("inflight", "members", "records_per_txn", "send_offsets")


def ratio_row(ours: dict[str, Any], peer: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"target": "ours/peer"}
    for key in ROW_KEYS:
        if key in ours:
            row[key] = ours[key]
    for column in columns:
        a, b = ours.get(column), peer.get(column)
        if isinstance(a, int | float) and isinstance(b, int | float) and b:
            # Three significant digits: a ratio may be far below 1 (rebalance times).
            row[column] = float(f"{a / b:.3g}")
    return row


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A plain-text table of `columns` (missing values left blank)."""

    def cell(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, dict):
            # One figure per item (each node's CPU share, say), in order.
            return " ".join(cell(item) for item in value.values())
        if isinstance(value, float):
            if abs(value) >= 1000:
                return f"{value:,.0f}"
            return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value:,}"
        return str(value)

    cells = [[cell(row.get(column)) for column in columns] for row in rows]
    widths = [
        max(len(column), *(len(line[i]) for line in cells)) if cells else len(column)
        for i, column in enumerate(columns)
    ]
    lines = ["  ".join(column.rjust(width) for column, width in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * width for width in widths))
    lines.extend(
        "  ".join(value.rjust(width) for value, width in zip(line, widths, strict=True))
        for line in cells
    )
    return "\n".join(lines)


def to_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False)
