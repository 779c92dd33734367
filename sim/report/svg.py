"""Plotly figures drawn as static SVG, for the HTML report: the same traces, colours, axes and
titles as the dashboard's charts (sim/report/charts.py), without the 4.8 MB plotly.js bundle, so a
report of a bundled sample stays well under 1 MB and opens anywhere, offline, with no script.

Covers what charts.py draws for one result: line and stacked-area scatters, bars, subplots
(axis domains), secondary y axes (`overlaying`), log axes, dashes, subplot titles and a legend.
Interactivity (hover, zoom) is the price; the dashboard keeps it.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

WIDTH = 1000
MARGIN = {"l": 70, "r": 70, "t": 56, "b": 40}
LEGEND_ROW = 22
DASH = {"solid": "", "dash": "8,5", "dot": "2,4", "dashdot": "8,4,2,4", "longdash": "14,6", "longdashdot": "14,5,2,5"}
FONT = 'font-family="system-ui, sans-serif"'


@dataclass
class Axis:
    """One axis: its pixel span and its data range (log10 of the data on a log axis)."""

    lo_px: float
    hi_px: float
    log: bool
    lo: float = 0.0
    hi: float = 1.0

    def fit(self, values: np.ndarray) -> None:
        v = values[np.isfinite(values)]
        if self.log:
            v = np.log10(v[v > 0])
        if not v.size:
            return
        lo, hi = float(v.min()), float(v.max())
        if not self.log:
            lo = min(lo, 0.0) if lo >= 0 else lo
        if hi <= lo:
            hi = lo + 1.0
        self.lo, self.hi = lo, hi

    def px(self, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=float)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.where(v > 0, np.log10(np.where(v > 0, v, 1.0)), np.nan)
        return self.lo_px + (v - self.lo) / (self.hi - self.lo) * (self.hi_px - self.lo_px)

    def ticks(self) -> list[tuple[float, str]]:
        if self.log:
            return [(10.0**k, _short(10.0**k)) for k in range(math.floor(self.lo), math.ceil(self.hi) + 1)
                    if self.lo - 1e-9 <= k <= self.hi + 1e-9]
        step = _nice_step((self.hi - self.lo) / 5)
        first = math.ceil(self.lo / step) * step
        return [(t, _short(t)) for t in np.arange(first, self.hi + step / 2, step)]


def _nice_step(raw: float) -> float:
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _short(v: float) -> str:
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:.3g}" if a else "0"


def _arr(values: Any) -> np.ndarray:
    if values is None:
        return np.zeros(0)
    return np.asarray(values, dtype=float).ravel()


def _axis_key(ref: str | None, letter: str) -> str:
    ref = ref or letter
    return f"{letter}axis{ref[1:]}"


def _path(xs: np.ndarray, ys: np.ndarray) -> str:
    """An SVG path through the points, broken at NaN."""
    out, pen = [], "M"
    for x, y in zip(xs, ys, strict=True):
        if not (math.isfinite(x) and math.isfinite(y)):
            pen = "M"
            continue
        out.append(f"{pen}{x:.1f},{y:.1f}")
        pen = "L"
    return "".join(out)


def _text(x: float, y: float, text: str, size: int = 12, anchor: str = "middle", extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" {FONT} fill="#374151" '
            f'{extra}>{html.escape(str(text))}</text>')


def figure_svg(fig: Any) -> str:
    """The figure as one <svg> element (see the module docstring for what is drawn)."""
    layout = fig.layout
    traces = [t for t in fig.data if t.type in ("scatter", "bar")]
    names = [t.name for t in traces if t.name and t.showlegend is not False]
    legend = layout.showlegend is not False and len(names) > 1
    height = int(layout.height or 400)
    total = height + (LEGEND_ROW * math.ceil(len(names) / 4) if legend else 0)
    left, right, top, bottom = MARGIN["l"], WIDTH - MARGIN["r"], MARGIN["t"], height - MARGIN["b"]
    axes: dict[str, Axis] = {}
    for t in traces:
        for letter, ref in (("x", t.xaxis), ("y", t.yaxis)):
            key = _axis_key(ref, letter)
            if key in axes:
                continue
            spec = layout[key]  # plotly answers every xaxisN / yaxisN with its settings or defaults
            domain = list(spec.domain) if spec is not None and spec.domain else [0.0, 1.0]
            anchor = spec.overlaying if spec is not None and spec.overlaying else None
            if anchor:  # a secondary y axis shares its partner's domain
                partner = layout[_axis_key(anchor, "y")]
                domain = list(partner.domain) if partner.domain else [0.0, 1.0]
            log = spec is not None and spec.type == "log"
            if letter == "x":
                axes[key] = Axis(left + domain[0] * (right - left), left + domain[1] * (right - left), log)
            else:
                axes[key] = Axis(bottom - domain[0] * (bottom - top), bottom - domain[1] * (bottom - top), log)
    _fit_axes(traces, axes)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {total}" width="100%" role="img">',
             f'<rect width="{WIDTH}" height="{total}" fill="white"/>']
    title = layout.title.text if layout.title and layout.title.text else ""
    if title:
        parts.append(_text(left, 24, title, 16, "start", 'font-weight="600"'))
    parts += _draw_axes(layout, axes)
    parts += _draw_traces(traces, axes)
    for ann in layout.annotations or ():  # subplot titles (paper coordinates)
        if ann.xref == "paper" and ann.yref == "paper" and ann.text:
            parts.append(_text(left + ann.x * (right - left), bottom - ann.y * (bottom - top) - 6, ann.text, 13))
    if legend:
        parts += _legend(traces, height)
    parts.append("</svg>")
    return "".join(parts)


def _fit_axes(traces: list[Any], axes: dict[str, Axis]) -> None:
    xs: dict[str, list[np.ndarray]] = {}
    ys: dict[str, list[np.ndarray]] = {}
    stacks: dict[tuple[str, str], np.ndarray] = {}
    for t in traces:
        x, y = _arr(t.x), _arr(t.y)
        xkey, ykey = _axis_key(t.xaxis, "x"), _axis_key(t.yaxis, "y")
        xs.setdefault(xkey, []).append(x)
        if getattr(t, "stackgroup", None):
            base = stacks.get((ykey, t.stackgroup), np.zeros_like(y))
            y = base + np.nan_to_num(y)
            stacks[(ykey, t.stackgroup)] = y
        ys.setdefault(ykey, []).append(np.append(y, 0.0) if t.type == "bar" else y)
    for key, axis in axes.items():
        values = (xs if key.startswith("x") else ys).get(key, [])
        if values:
            axis.fit(np.concatenate(values))


def _draw_axes(layout: Any, axes: dict[str, Axis]) -> list[str]:
    out = []
    x_axes = {k: a for k, a in axes.items() if k.startswith("x")}
    y_axes = {k: a for k, a in axes.items() if k.startswith("y")}
    for key, ax in y_axes.items():
        spec = layout[key]
        right_side = bool(spec.overlaying) or spec.side == "right"
        x_span = next(iter(x_axes.values()))
        at = x_span.hi_px if right_side else min(a.lo_px for a in x_axes.values())
        for value, label in ax.ticks():
            y = float(ax.px(np.array([value]))[0])
            if not right_side:
                out.append(f'<line x1="{at:.1f}" x2="{max(a.hi_px for a in x_axes.values()):.1f}" y1="{y:.1f}" '
                           f'y2="{y:.1f}" stroke="#e5e7eb"/>')
            out.append(_text(at + (6 if right_side else -6), y + 4, label, 11, "start" if right_side else "end"))
        if spec.title and spec.title.text:
            cx, cy = (at + 52 if right_side else at - 52), (ax.lo_px + ax.hi_px) / 2
            out.append(_text(cx, cy, spec.title.text, 12, "middle", f'transform="rotate(-90 {cx:.1f} {cy:.1f})"'))
    for key, ax in x_axes.items():
        spec = layout[key]
        base = max(a.lo_px for a in y_axes.values()) if y_axes else 0.0
        out.append(f'<line x1="{ax.lo_px:.1f}" x2="{ax.hi_px:.1f}" y1="{base:.1f}" y2="{base:.1f}" stroke="#9ca3af"/>')
        for value, label in ax.ticks():
            x = float(ax.px(np.array([value]))[0])
            out.append(_text(x, base + 16, label, 11))
        if spec.title and spec.title.text:
            out.append(_text((ax.lo_px + ax.hi_px) / 2, base + 32, spec.title.text, 12))
    return out


def _draw_traces(traces: list[Any], axes: dict[str, Axis]) -> list[str]:
    out = []
    stacks: dict[tuple[str, str], np.ndarray] = {}
    for t in traces:
        xa, ya = axes[_axis_key(t.xaxis, "x")], axes[_axis_key(t.yaxis, "y")]
        x, y = _arr(t.x), _arr(t.y)
        if not x.size:
            continue
        colour = (t.marker.color if t.type == "bar" else (t.line.color or t.fillcolor)) or "#2563eb"
        if t.type == "bar":
            width = float(t.width) if t.width is not None else (float(np.median(np.diff(x))) if x.size > 1 else 1.0)
            x0, x1 = xa.px(x - width * 0.4), xa.px(x + width * 0.4)
            y0, y1 = ya.px(np.zeros_like(y)), ya.px(y)
            out += [f'<rect x="{a:.1f}" y="{min(b, c):.1f}" width="{max(d - a, 0.8):.1f}" height="{abs(c - b):.1f}" '
                    f'fill="{colour}"/>' for a, d, b, c in zip(x0, x1, y0, y1, strict=True) if np.isfinite(c) and c != b]
            continue
        px = xa.px(x)
        if getattr(t, "stackgroup", None):
            key = (_axis_key(t.yaxis, "y"), t.stackgroup)
            base = stacks.get(key, np.zeros_like(y))
            top = base + np.nan_to_num(y)
            stacks[key] = top
            ring = np.concatenate([px, px[::-1]]), np.concatenate([ya.px(top), ya.px(base)[::-1]])
            out.append(f'<path d="{_path(*ring)}Z" fill="{t.fillcolor or colour}" stroke="none"/>')
            continue
        dash = DASH.get(t.line.dash or "solid", "")
        width = t.line.width or 2
        out.append(f'<path d="{_path(px, ya.px(y))}" fill="none" stroke="{colour}" stroke-width="{width}"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
    return out


def _legend(traces: list[Any], height: int) -> list[str]:
    out = []
    shown = [t for t in traces if t.name and t.showlegend is not False]
    for i, t in enumerate(shown):
        x, y = MARGIN["l"] + (i % 4) * 230, height + 6 + (i // 4) * LEGEND_ROW
        colour = (t.marker.color if t.type == "bar" else (t.line.color or t.fillcolor)) or "#2563eb"
        out.append(f'<rect x="{x}" y="{y}" width="14" height="10" fill="{colour}"/>')
        out.append(_text(x + 20, y + 10, t.name, 12, "start"))
    return out
