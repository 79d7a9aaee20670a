"""Per-stream timeline picture of one run (matplotlib, Agg canvas: no display needed).

One row per stream (stream 0 on top), one bar per operator coloured by op type and labelled
with its name where the name fits (else its op type, else nothing), red arrows from each Send
to its Recv, and the summary figures in the title. pyplot is not used, so the caller's
matplotlib backend and global state are left alone.
"""
from __future__ import annotations

import os

from ..errors import PygeError

_BAR_H = 0.62
_FONT = 7.5


def _unit(span_s: float) -> tuple[float, str]:
    if span_s >= 1.0:
        return 1.0, "s"
    if span_s >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def _colours(op_types: list[str]) -> dict[str, tuple]:
    from matplotlib import colormaps
    cmap = colormaps["tab20"]
    return {t: cmap(i % 20) for i, t in enumerate(sorted(set(op_types)))}


def _label(name: str, op_type: str, width_px: float) -> str | None:
    char_px = _FONT * 0.62 * _DPI / 72.0
    for text in (name, op_type):
        if len(text) * char_px + 4 <= width_px:
            return text
    return None


_DPI = 110


def _title(profile, run: int, scale: float, unit: str) -> str:
    s = profile.summary()
    runs = sorted({r.run for r in profile.records})
    parts = [f"{profile.graph_name} on {profile.device} ({profile.mode}), "
             f"run {runs.index(run) + 1 if run in runs else run + 1} of {s['runs']}",
             f"wall {s['wall_s'] * scale:.3g} {unit}, serial {s['serial_s'] * scale:.3g} {unit}, "
             f"concurrency {s['concurrency']:.2f}x"]
    if s.get("bound") is not None:
        parts[-1] += f", critical-path bound {s['bound']:.2f}x"
    return "\n".join(parts)


def _draw_ops(ax, recs, t0, scale, colours, px_per_unit):
    for r in recs:
        x, w = (r.start - t0) * scale, max((r.end - r.start) * scale, 0.0)
        ax.barh(r.stream, w, left=x, height=_BAR_H, color=colours[r.op_type], edgecolor="black",
                linewidth=0.4)
        text = _label(r.name, r.op_type, w * px_per_unit)
        if text:
            ax.text(x + w / 2, r.stream, text, ha="center", va="center", fontsize=_FONT, clip_on=True)


def _draw_events(ax, events, t0, scale):
    for e in events:
        down = 1 if e.dst_stream > e.src_stream else -1
        ax.annotate("", xy=((e.recv - t0) * scale, e.dst_stream - down * _BAR_H / 2),
                    xytext=((e.send - t0) * scale, e.src_stream + down * _BAR_H / 2),
                    arrowprops={"arrowstyle": "-|>", "color": "crimson", "lw": 1.1,
                                "shrinkA": 0, "shrinkB": 0})
    if 0 < len(events) <= 24:
        for e in events:
            xm = ((e.send + e.recv) / 2 - t0) * scale
            ax.text(xm, (e.src_stream + e.dst_stream) / 2, f" e{e.event_id}", color="crimson",
                    fontsize=_FONT, va="center")


def plot_timeline(profile, path, run: int | None = None, span_s: float | None = None) -> str:
    """Draw `run` (default: the representative one) and write it to `path`. `span_s` fixes the
    time axis (its length in seconds, and so its unit), so that pictures of two profiles that
    are meant to be compared share one scale; it grows to fit this run if too short."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    path = os.fspath(path)
    run = profile.representative_run() if run is None else run
    recs = profile.run_records(run)
    if not recs:
        raise PygeError(f"profile has no operator records for run {run}")
    t0 = min(r.start for r in recs)
    span = max(max(r.end for r in recs) - t0, span_s or 0.0)
    scale, unit = _unit(span)
    n = max(profile.num_streams, 1 + max(r.stream for r in recs))
    fig = Figure(figsize=(14, 1.9 + 0.8 * n), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colours = _colours([r.op_type for r in recs])
    ax.set_xlim(-0.01 * span * scale, span * scale * 1.01)
    px_per_unit = (14 * _DPI * 0.88) / (span * scale * 1.02 or 1.0)
    _draw_ops(ax, recs, t0, scale, colours, px_per_unit)
    _draw_events(ax, [e for e in profile.events if e.run == run], t0, scale)
    ax.set_yticks(range(n), [f"stream {s}" for s in range(n)])
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel(f"time since the run's first operator started ({unit})")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(_title(profile, run, scale, unit), fontsize=10)
    if len(colours) <= 16:
        handles = [Patch(facecolor=c, edgecolor="black", label=t) for t, c in colours.items()]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=_FONT,
                  title="op type", title_fontsize=_FONT)
    try:
        fig.savefig(path)
    except OSError as err:
        raise PygeError(f"cannot write timeline {path!r}: {err.strerror or err}") from err
    return path
