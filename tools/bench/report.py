"""The benchmark's tables: the file storage's figures as plain text or Markdown, and the Markdown both suites print.

Owns: ``render`` (the file storage's table), ``fmt`` (a figure's value at a
sensible precision), ``markdown_table`` (shared with the PostgreSQL suite)
and ``table`` (rows as aligned text or Markdown, for every table of the file
storage's suites). Imports: plan. Printing stays with the suites' ``main``.
"""

from __future__ import annotations

from tools.bench.plan import Figure


def fmt(value: float) -> str:
    """``value`` with as many digits as a reader can use: none from 100 up, one from 10, two below."""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, for README.md."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def render(figures: list[Figure], *, markdown: bool) -> str:
    """The table of ``figures``: figure, value, the disk's limit, the ratio to it, the target, the verdict."""
    header = ["figure", "value", "limit", "ratio", "target", "verdict"]
    rows = [
        [
            f.name, f"{fmt(f.value)} {f.unit}", "" if f.limit is None else f"{fmt(f.limit)}/s",
            "" if f.ratio is None else f"{f.ratio:.2f} x", f.target,
            "met" if f.ok else ("short" if f.ok is False else ""),
        ]
        for f in figures
    ]  # fmt: skip
    return table(header, rows, markdown=markdown)


def table(header: list[str], rows: list[list[str]], *, markdown: bool) -> str:
    """``rows`` under ``header``: a Markdown table, or plain text in aligned columns."""
    assert all(len(r) == len(header) for r in rows), "every row has a cell per column"
    if markdown:
        return markdown_table(header, rows)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows])


__all__ = ["render", "fmt", "markdown_table", "table"]
