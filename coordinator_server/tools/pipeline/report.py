"""The history as one self-contained HTML page: plots embedded as PNG data URIs, tables
inline, no script and nothing fetched from elsewhere, so it can be mailed or archived.

Only aggregates reach the driver: the busiest groups' series, the regressions and
rebalance counts (each capped), never the log itself.
"""

from __future__ import annotations

import base64
import concurrent.futures
import datetime
import html
import io
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from coordinator_server.tools.pipeline.history import HistoryTables

__all__ = ["render_report", "write_report"]

TOP_GROUPS: Final = 10
TABLE_ROWS: Final = 200
# Queries of the report run at once.
COLLECTORS: Final = 4
REBALANCE_COLUMNS: Final = [
    "group", "rebalances", "last_generation", "distinct_members", "window_hours",
    "rebalances_per_hour",
]  # fmt: skip

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 80em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; }
th { background: #f0f0f0; } td.n { text-align: right; }
img { max-width: 100%; border: 1px solid #eee; }
.note { color: #666; font-size: 0.9em; }
"""


def _figure_png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def prepare_plotting() -> None:
    """Import matplotlib in the background (about a second), while the caller's Spark
    session starts: the report's first plot then finds it loaded."""
    threading.Thread(target=_pyplot, name="import matplotlib", daemon=True).start()


def _pyplot() -> Any:
    import matplotlib

    # No display: render to memory only.
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series_plot(
    series: dict[str, list[tuple[datetime.datetime, float]]], title: str, ylabel: str
) -> str | None:
    if not series:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(10, 4))
    for name, points in sorted(series.items()):
        points.sort()
        axes.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=name)
    axes.set_title(title)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small", loc="best")
    figure.autofmt_xdate()
    return _figure_png(figure)


def _bar_plot(
    labels: Sequence[str], values: Sequence[float], title: str, xlabel: str
) -> str | None:
    if not labels:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(10, max(2.0, 0.35 * len(labels) + 1)))
    positions = list(range(len(labels)))
    colors = ["#c0392b" if value < 0 else "#2c7fb8" for value in values]
    axes.barh(positions, values, color=colors)
    axes.set_yticks(positions, labels=list(labels), fontsize="small")
    axes.invert_yaxis()
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.grid(True, axis="x", alpha=0.3)
    return _figure_png(figure)


def _top_groups(frame: DataFrame, weight: str) -> list[str]:
    rows = (
        frame.groupBy("group").agg(F.sum(weight).alias("w")).orderBy(F.desc("w")).limit(TOP_GROUPS)
    )
    return [row.group for row in rows.collect()]


def _table(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    def cell(value: Any) -> str:
        css = ' class="n"' if isinstance(value, int | float) and not isinstance(value, bool) else ""
        if isinstance(value, list):
            value = ", ".join(str(item) for item in value)
        elif isinstance(value, float):
            value = f"{value:,.2f}"
        text = "" if value is None else str(value)
        return f"<td{css}>{html.escape(text)}</td>"

    head = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = "".join(
        "<tr>" + "".join(cell(row.get(column)) for column in columns) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _collect(
    frame: DataFrame, columns: Sequence[str], order: Sequence[Any]
) -> list[dict[str, Any]]:
    return [
        row.asDict() for row in frame.orderBy(*order).select(*columns).limit(TABLE_ROWS).collect()
    ]


def _busiest_series(
    frame: DataFrame, weight: str, time: str
) -> dict[str, list[tuple[datetime.datetime, float]]]:
    """The series of `weight` over `time` of the busiest groups of `frame`."""
    series: dict[str, list[tuple[datetime.datetime, float]]] = {}
    for row in frame.filter(F.col("group").isin(_top_groups(frame, weight))).collect():
        series.setdefault(row.group, []).append((row[time], float(row[weight])))
    return series


_LAG_COLUMNS: Final = [
    "group", "topic", "partition", "committed_offset", "log_end_offset", "lag",
]  # fmt: skip
_REGRESSION_COLUMNS: Final = [
    "group", "topic", "partition", "previous_offset", "committed_offset", "moved_by",
    "commit_timestamp", "generation", "committed_by", "client_id", "client_host",
]  # fmt: skip
_IDLE_COLUMNS: Final = ["group", "state", "last_commit", "first_seen", "idle_ms"]
_STATE_COLUMNS: Final = ["transaction_state", "transactional_ids", "pending_offsets"]
_OPEN_COLUMNS: Final = [
    "transactional_id", "transaction_state", "producer_id", "producer_epoch",
    "transaction_start_timestamp", "transaction_update_timestamp",
]  # fmt: skip
_BLOCK_COLUMNS: Final = ["log_partition", "next_block_start", "blocks_reserved", "log_timestamp"]


def _gather(history: HistoryTables) -> dict[str, Any]:
    """What the report shows, each part collected by a query of its own, side by side:
    on a small log each is mostly the driver planning it and Spark scheduling it, which
    overlap (the report of a 57-record log, collected one query after another, finished
    last of the history's work)."""
    tables = history.tables
    queries: dict[str, Any] = {
        "commit_series": lambda: _busiest_series(tables["commit_rate"], "commits", "bucket_start"),
        "summary": lambda: _collect(
            tables["rebalance_summary"], REBALANCE_COLUMNS, [F.desc("rebalances"), "group"]
        ),
        "regressions": lambda: _collect(
            tables["regressions"], _REGRESSION_COLUMNS, ["commit_timestamp", "group", "topic"]
        ),
        "idle": lambda: _collect(tables["idle_groups"], _IDLE_COLUMNS, [F.desc("idle_ms")]),
        "states": lambda: _collect(
            tables["transactions_by_state"],
            _STATE_COLUMNS,
            [F.desc("transactional_ids"), "transaction_state"],
        ),
        "open": lambda: _collect(
            tables["transactions"].filter(
                F.col("transaction_state").isin("Ongoing", "PrepareCommit", "PrepareAbort")
            ),
            _OPEN_COLUMNS,
            ["transaction_start_timestamp", "transactional_id"],
        ),
        "blocks": lambda: _collect(tables["producer_id_blocks"], _BLOCK_COLUMNS, ["log_partition"]),
    }
    if "lag_over_time" in tables:
        per_group = tables["lag_over_time"].groupBy("group", "time").agg(F.sum("lag").alias("lag"))
        queries["lag_series"] = lambda: _busiest_series(per_group, "lag", "time")
        queries["lag_now"] = lambda: _collect(
            tables["lag"], _LAG_COLUMNS, [F.desc("lag"), "group", "topic", "partition"]
        )
    with concurrent.futures.ThreadPoolExecutor(COLLECTORS, "collect report") as pool:
        running = {name: pool.submit(query) for name, query in queries.items()}
        return {name: result.result() for name, result in running.items()}


def render_report(history: HistoryTables, title: str, source: str) -> str:
    parts = _gather(history)
    sections: list[str] = []

    # Commit rate over time.
    sections.append("<h2>Commit rate over time</h2>")
    sections.append(
        _image(_series_plot(parts["commit_series"], "Commits per bucket", "commits"), "commits")
    )

    # Lag over time.
    sections.append("<h2>Consumer lag over time</h2>")
    if "lag_series" in parts:
        sections.append(
            _image(
                _series_plot(parts["lag_series"], "Total lag per group", "records behind"), "lag"
            )
        )
        sections.append("<h3>Lag now</h3>")
        sections.append(_table(parts["lag_now"], _LAG_COLUMNS))
    else:
        sections.append(
            '<p class="note">No lag: run with --kafka-bootstrap-servers of the data cluster.</p>'
        )

    # Rebalances.
    summary = parts["summary"]
    sections.append("<h2>Rebalances per group</h2>")
    top = summary[:20]
    sections.append(
        _image(
            _bar_plot(
                [row["group"] for row in top],
                [float(row["rebalances"]) for row in top],
                "Rebalances (completed generations)",
                "rebalances",
            ),
            "rebalances",
        )
    )
    sections.append(_table(summary, REBALANCE_COLUMNS))

    # Regressions.
    regression_rows = parts["regressions"]
    sections.append(f"<h2>Offsets that moved backwards ({len(regression_rows)})</h2>")
    sections.append(
        _image(
            _bar_plot(
                [
                    f"{row['group']} {row['topic']}-{row['partition']} @ {row['commit_timestamp']}"
                    for row in regression_rows[:30]
                ],
                [float(row["moved_by"]) for row in regression_rows[:30]],
                "Offset regressions (records moved back)",
                "moved by",
            ),
            "regressions",
        )
    )
    sections.append(_table(regression_rows, _REGRESSION_COLUMNS))

    # Idle groups.
    sections.append("<h2>Groups without a recent commit</h2>")
    sections.append(_table(parts["idle"], _IDLE_COLUMNS))

    # Transactions.
    states = parts["states"]
    sections.append("<h2>Transactions by state</h2>")
    if states:
        sections.append(
            _image(
                _bar_plot(
                    [row["transaction_state"] for row in states],
                    [float(row["transactional_ids"]) for row in states],
                    "Transactional ids by state",
                    "transactional ids",
                ),
                "transactions",
            )
        )
        sections.append(_table(states, _STATE_COLUMNS))
        sections.append("<h3>Open transactions, oldest first</h3>")
        sections.append(_table(parts["open"], _OPEN_COLUMNS))
    else:
        sections.append('<p class="note">No transactional ids in the log.</p>')
    blocks = parts["blocks"]
    sections.append(f"<h2>Producer id blocks handed out ({len(blocks)} log partitions)</h2>")
    if blocks:
        sections.append(_table(blocks, _BLOCK_COLUMNS))

    generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f'<p class="note">Log: {html.escape(source)}. Generated {generated}.</p>'
        + "".join(sections)
        + "</body></html>\n"
    )


def _image(data_uri: str | None, what: str) -> str:
    if data_uri is None:
        return f'<p class="note">No {html.escape(what)} to plot.</p>'
    return f'<p><img alt="{html.escape(what)}" src="{data_uri}"></p>'


def write_report(history: HistoryTables, path: Path, title: str, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(history, title, source), encoding="utf-8")
    return path
