"""The PostgreSQL benchmark's table: each figure beside the hand-written loop's, its ratio, target and verdict.

Owns: TARGETS (the figures that have one), ``figure_rows`` (a figure's
medians as rows: one, or a median and a p99 for the pickup latency) and
``render`` (the table, as text or Markdown). Imports: report
(markdown_table).
"""

from __future__ import annotations

import statistics
from typing import Any

from tools.bench.report import markdown_table

#: Targets (issue 6 "Speed", issue 19 item 8). (figure key, kind, value): kind "ratio" compares
#: with the baseline, "min" is an absolute floor, "max" an absolute ceiling.
TARGETS: dict[str, tuple[str, float]] = {
    "enqueue_single": ("ratio", 0.8),
    "enqueue_batch": ("ratio", 1.0),
    "drain_1_one": ("ratio", 0.8),
    "drain_4_one": ("ratio", 0.8),
    "worker_1": ("ratio", 0.8),
    "worker_4": ("ratio", 0.8),
    "drain_4_batch": ("ratio", 0.5),
    "pickup_median": ("max", 5.0),
}


def figure_rows(
    key: str, label: str, values: list[list[Any]], sent: list[tuple[float, float]] | None
) -> list[dict[str, Any]]:
    """A figure's rows from each contender's values (nobroker first, the baseline last): their medians."""
    if key != "pickup":
        return [_row(key, label, "jobs/s", [statistics.median(v) for v in values], sent)]
    medians = [statistics.median(m for m, _ in v) for v in values]
    p99s = [statistics.median(p for _, p in v) for v in values]
    return [
        _row("pickup_median", f"{label}, median", "ms", medians, sent, lower_is_better=True),
        _row("pickup_p99", f"{label}, p99", "ms", p99s, None, lower_is_better=True),
    ]



def _ratio(value: float, baseline: float, lower_is_better: bool) -> float:
    if not value or not baseline:
        return float("nan")
    return baseline / value if lower_is_better else value / baseline


def _row(
    key: str, label: str, unit: str, values: list[float], sent: list[tuple[float, float]] | None,
    *, lower_is_better: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """One figure: nobroker's value first, then the peer's (if any), the baseline's last."""
    value, baseline = values[0], values[-1]
    ratio = _ratio(value, baseline, lower_is_better)
    target_text, verdict = "", ""
    if key in TARGETS:
        kind, goal = TARGETS[key]
        if kind == "ratio":
            target_text, ok = f">= {goal:g} x baseline", ratio >= goal
        elif kind == "min":
            target_text, ok = f">= {goal:,.0f} {unit}", value >= goal
        else:
            target_text, ok = f"<= {goal:g} {unit}", value <= goal
        verdict = "met" if ok else "MISSED"
    row = {
        "key": key, "figure": label, "unit": unit, "value": value, "baseline": baseline,
        "ratio": ratio, "target": target_text, "verdict": verdict, "sent": sent,
    }  # fmt: skip
    if len(values) == 3:
        row["peer"], row["peer_ratio"] = values[1], _ratio(values[1], baseline, lower_is_better)
    return row


def _fmt(value: float, unit: str) -> str:
    return f"{value:,.2f} {unit}" if unit == "ms" else f"{value:,.0f} {unit}"


def _fmt_sent(sent: list[tuple[float, float]] | None, which: int) -> str:
    """nobroker's count / (the peer's /) the baseline's, statements (0) or round trips (1)."""
    if sent is None:
        return ""
    return " / ".join(f"{s[which]:.2f}".rstrip("0").rstrip(".") for s in sent)


def render(rows: list[dict[str, Any]], *, markdown: bool = False) -> str:
    peer = any("peer" in r for r in rows)
    header = ["figure", "nobroker", *(["peer"] if peer else []), "hand-written", "ratio",
              *(["peer ratio"] if peer else []), "statements", "round trips", "target", "verdict"]  # fmt: skip
    table = [
        [r["figure"], _fmt(r["value"], r["unit"]), *([_fmt(r["peer"], r["unit"])] if peer else []),
         _fmt(r["baseline"], r["unit"]), f"{r['ratio']:.2f}", *([f"{r['peer_ratio']:.2f}"] if peer else []),
         _fmt_sent(r["sent"], 0), _fmt_sent(r["sent"], 1), r["target"], r["verdict"]]
        for r in rows
    ]  # fmt: skip
    if markdown:
        return markdown_table(header, table)
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
    out = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(header)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells)) for cells in table]
    return "\n".join(out)
