"""The inspector's plots as SVG markup made here, on the server: no script draws them, and
every text in them is escaped. Pure functions of the rows :mod:`pgmem.ui.data` reads."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from html import escape
from typing import Any

from markupsafe import Markup

from pgmem import scoring

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 40


def _frame(title: str, body: list[str], x_label: str, y_label: str) -> Markup:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    return Markup(
        f'<svg class="plot" role="img" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">'
        f"<title>{escape(title)}</title>"
        f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/>'
        + "".join(body)
        + f'<text class="label" x="{LEFT + plot_w / 2}" y="{HEIGHT - 6}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
        f'<text class="label" x="12" y="{TOP + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 12 {TOP + plot_h / 2})">{escape(y_label)}</text>'
        "</svg>"
    )


def timeline(rows: Sequence[dict[str, Any]], bins: int) -> Markup | None:
    """Memories added over time: a bar per span of time (the ``timeline`` rows), or None for a
    scope without memories."""
    if not rows:
        return None
    first: datetime = rows[0]["first"]
    last: datetime = rows[0]["last"]
    counts = {int(row["bin"]): int(row["memories"]) for row in rows}
    top = max(counts.values())
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bar_w = plot_w / bins
    body = []
    for b, n in sorted(counts.items()):
        h = plot_h * n / top
        body.append(
            f'<rect class="bar" x="{LEFT + (b - 1) * bar_w:.1f}" y="{TOP + plot_h - h:.1f}" '
            f'width="{max(bar_w - 1, 1):.1f}" height="{h:.1f}"><title>{n} memories</title></rect>'
        )
    body.append(f'<text class="tick" x="{LEFT - 4}" y="{TOP + 10}" text-anchor="end">{top}</text>')
    body.append(f'<text class="tick" x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end">0</text>')
    body.append(f'<text class="tick" x="{LEFT}" y="{TOP + plot_h + 14}">'
                f'{escape(first.strftime("%Y-%m-%d %H:%M"))}</text>')
    body.append(f'<text class="tick" x="{LEFT + plot_w}" y="{TOP + plot_h + 14}" '
                f'text-anchor="end">{escape(last.strftime("%Y-%m-%d %H:%M"))}</text>')
    return _frame("Memories added over time", body, "time (UTC)", "memories")


def fanout(rows: Sequence[dict[str, Any]], scope_size: int) -> Markup | None:
    """The scope's entities by how many of its memories each links to (log scale of links),
    with the weight pgmem's default scoring gives that spread drawn over them
    (:meth:`pgmem.scoring.Scoring.spread_weight`, 0..1 on the right axis); None without
    entities."""
    if not rows:
        return None
    most = max(int(row["links"]) for row in rows)
    top = max(int(row["entities"]) for row in rows)
    x_max = math.log10(max(most, 10)) + 0.05
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(links: float) -> float:
        return LEFT + plot_w * math.log10(links) / x_max

    body = []
    for row in rows:
        links, n = int(row["links"]), int(row["entities"])
        h = plot_h * n / top
        names = ", ".join(row["examples"] or [])
        body.append(
            f'<rect class="bar" x="{x(links) - 2:.1f}" y="{TOP + plot_h - h:.1f}" width="4" '
            f'height="{h:.1f}"><title>{n} entities link to {links} memories '
            f"(e.g. {escape(names)})</title></rect>"
        )
    points = []
    steps = 120
    for i in range(steps + 1):
        at = 10 ** (x_max * i / steps)
        weight = scoring.DEFAULT.spread_weight(max(1, round(at)), scope_size)
        points.append(f"{x(at):.1f},{TOP + plot_h * (1 - weight):.1f}")
    body.append(f'<polyline class="curve" points="{" ".join(points)}"/>')
    for decade in range(int(x_max) + 1):
        body.append(f'<text class="tick" x="{x(10 ** decade):.1f}" y="{TOP + plot_h + 14}" '
                    f'text-anchor="middle">{10 ** decade}</text>')
    body.append(f'<text class="tick" x="{LEFT - 4}" y="{TOP + 10}" text-anchor="end">{top}</text>')
    body.append(f'<text class="tick curve-label" x="{LEFT + plot_w - 4}" y="{TOP + 12}" '
                'text-anchor="end">weight 1</text>')
    return _frame("Entities by the number of memories they link to",
                  body, "memories an entity links to (log scale)", "entities")
