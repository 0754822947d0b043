"""Small server-side SVG line plots (no JavaScript, no plotting library)."""

from __future__ import annotations

import html
import time

Points = list[tuple[float, float]]  # (unix seconds, value)


def line_plot(points: Points, title: str, unit: str = "", width: int = 560,
              height: int = 160) -> str:
    """An SVG of ``points`` over the last hour (or their span if shorter); an empty
    frame with a note when there are fewer than two points."""
    pad_l, pad_r, pad_t, pad_b = 56, 10, 22, 22
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    parts = [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" role="img" aria-label="{html.escape(title)}">',
             f'<text x="{pad_l}" y="14" class="plot-title">{html.escape(title)}</text>',
             f'<rect x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" class="plot-frame"/>']
    if len(points) < 2:
        parts.append(f'<text x="{pad_l + 8}" y="{pad_t + h / 2}" class="plot-note">'
                     'collecting samples ...</text></svg>')
        return "".join(parts)
    t_end = max(t for t, _ in points)
    t_start = min(min(t for t, _ in points), t_end - 1)
    top = max(v for _, v in points)
    top = top if top > 0 else 1.0  # an all-zero series: a flat line at the bottom
    xy = " ".join(f"{pad_l + (t - t_start) / (t_end - t_start) * w:.1f},"
                  f"{pad_t + h - (v / top) * h:.1f}" for t, v in points)
    parts.append(f'<polyline points="{xy}" class="plot-line"/>')
    parts.append(f'<text x="{pad_l - 4}" y="{pad_t + 8}" class="plot-axis" '
                 f'text-anchor="end">{_num(top)}{html.escape(unit)}</text>')
    parts.append(f'<text x="{pad_l - 4}" y="{pad_t + h}" class="plot-axis" '
                 f'text-anchor="end">0</text>')
    span = t_end - t_start
    parts.append(f'<text x="{pad_l}" y="{height - 6}" class="plot-axis">'
                 f'-{_duration(span)}</text>')
    parts.append(f'<text x="{pad_l + w}" y="{height - 6}" class="plot-axis" text-anchor="end">'
                 f'{time.strftime("%H:%M:%S", time.localtime(t_end))}</text></svg>')
    return "".join(parts)


def _num(v: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.1f}{suffix}"
    return f"{v:.3g}"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
