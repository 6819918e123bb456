"""The wafer map: the placement drawn in the terminal (rich) and as a PNG (matplotlib, Agg).

Pipelined: every kernel's rectangle coloured by its model block (one colour per layer, as the
seed's Fig. 14), with a legend of block, kernels, PEs and share of the wafer. Weight streaming:
the whole wafer runs one layer at a time, so the picture is the per-layer timeline (forward and
backward, compute vs streaming). matplotlib is imported only when a PNG is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cs2sim.runtime.compiler.plan import Plan
from cs2sim.runtime.compiler.report import pe_share
from cs2sim.system.hardware import WaferSpec

__all__ = ["save_png", "render_rich", "block_legend", "PALETTE"]

# distinct colours, cycled (rich accepts the hex form too)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
           "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363")


def block_legend(plan: Plan) -> list[tuple[str, str, int, int, float]]:
    """(block, colour, kernels, PEs over all replicas, share of the wafer) in order."""
    total = plan.estimate["total_pes"]
    rows: dict[str, list[int]] = {}
    for k in plan.kernels:
        r = rows.setdefault(k["block"], [0, 0])
        r[0] += 1
        r[1] += k["pes"] * k["replicas"]
    return [(b, PALETTE[i % len(PALETTE)], n, pes, pes / total)
            for i, (b, (n, pes)) in enumerate(rows.items())]


def save_png(plan: Plan, path: Path, wafer: WaferSpec) -> Path:
    """Draw the wafer map (pipelined) or the layer timeline (weight streaming) into `path`."""
    # the object API with the Agg canvas: no pyplot (its import and global state are not needed)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    if plan.kernels:
        import numpy as np
        from matplotlib.colors import to_rgb

        fig = Figure(figsize=(7, 8.5))
        ax = fig.add_subplot()
        colour = {b: c for b, c, *_ in block_legend(plan)}
        img = np.full((wafer.height, wafer.width, 3), 0.95)  # (H, W, rgb) unused PEs light grey
        for k in plan.kernels:
            rgb = to_rgb(colour[k["block"]])
            for x, y, w, h in k["rects"]:
                img[y:y + h, x:x + w] = rgb
        ax.imshow(img, interpolation="nearest", extent=(0, wafer.width, wafer.height, 0))
        ax.set_xlim(0, wafer.width)
        ax.set_ylim(wafer.height, 0)
        ax.set_xlabel("x (PE)")
        ax.set_ylabel("y (PE)")
        legend = block_legend(plan)
        handles = [Patch(color=c, label=f"{b}: {pes:,} PEs ({share:.2%})")
                   for b, c, _, pes, share in legend[:24]]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7,
                  title=f"{plan.replicas} replica(s)")
        ax.set_title(f"{plan.model}: pipelined placement on {wafer.name} "
                     f"({pe_share(plan.estimate['active_pes'], plan.estimate['total_pes'])} of "
                     "PEs)")
    else:
        fig = Figure(figsize=(9, min(12.0, 0.12 * len(plan.layers) + 2)))
        ax = fig.add_subplot()
        names = [ly["name"] for ly in plan.layers]
        fwd = [ly["fwd_seconds"] for ly in plan.layers]
        bwd = [ly["bwd_seconds"] for ly in plan.layers]
        # forward in order, then backward in reverse order: start times in ms
        starts_f, starts_b, t = [], [0.0] * len(bwd), 0.0
        for f in fwd:
            starts_f.append(t * 1e3)
            t += f
        for i in reversed(range(len(bwd))):
            starts_b[i] = t * 1e3
            t += bwd[i]
        # one LineCollection per series (hlines): fast for a hundred layers
        ms = lambda key: [1e3 * ly[key] for ly in plan.layers]  # noqa: E731
        y = list(range(len(names)))
        y2 = [v + 0.4 for v in y]
        for ys, starts, key, col in ((y, starts_f, "fwd_compute_seconds", "#1f77b4"),
                                     (y2, starts_f, "fwd_stream_seconds", "#ff7f0e"),
                                     (y, starts_b, "bwd_compute_seconds", "#2ca02c"),
                                     (y2, starts_b, "bwd_stream_seconds", "#d62728")):
            ends = [s0 + d for s0, d in zip(starts, ms(key), strict=True)]
            ax.hlines(ys, starts, ends, colors=col, linewidth=3)
        step = max(1, len(names) // 30)  # at most ~30 labels
        ax.set_yticks(y[::step], names[::step], fontsize=6)
        ax.invert_yaxis()
        ax.set_xlabel("time in one step (ms, CS-2 estimate)")
        ax.legend(handles=[Patch(color="#1f77b4", label="forward compute"),
                           Patch(color="#ff7f0e", label="forward weight stream"),
                           Patch(color="#2ca02c", label="backward compute"),
                           Patch(color="#d62728", label="backward weights + gradients")],
                  fontsize=7, loc="lower right")
        ax.set_title(f"{plan.model}: weight-streaming schedule, {plan.num_csx} CS-X")
    fig.subplots_adjust(left=0.12, right=0.72 if plan.kernels else 0.97, top=0.94, bottom=0.08)
    path = Path(path)
    FigureCanvasAgg(fig)  # attaches the Agg canvas: savefig draws without pyplot
    fig.savefig(path, dpi=90)
    return path


def render_rich(plan: Plan, wafer: WaferSpec, cols: int = 64) -> Any:
    """A rich renderable: the wafer as a grid of coloured cells plus the legend table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if not plan.kernels:
        table = Table(title=f"{plan.model}: weight-streaming layer schedule (CS-2 estimate)")
        for col in ("layer", "forward ms", "backward ms", "bound"):
            table.add_column(col, justify="left" if col in ("layer", "bound") else "right")
        for ly in plan.layers:
            table.add_row(ly["name"], f"{ly['fwd_seconds'] * 1e3:.3f}",
                          f"{ly['bwd_seconds'] * 1e3:.3f}", ly["bound"])
        return table
    legend = block_legend(plan)
    colour = {b: c for b, c, *_ in legend}
    rows = max(1, round(cols * wafer.height / wafer.width / 2))  # a cell is ~2x taller than wide
    cw, ch = wafer.width / cols, wafer.height / rows
    grid: list[list[str | None]] = [[None] * cols for _ in range(rows)]
    for k in plan.kernels:
        for x, y, w, h in k["rects"]:
            # every cell whose centre lies inside the rectangle; a tiny one marks its own cell
            c0, c1 = int(x / cw), max(int(x / cw) + 1, round((x + w) / cw))
            r0, r1 = int(y / ch), max(int(y / ch) + 1, round((y + h) / ch))
            for r in range(r0, min(r1, rows)):
                for cc in range(c0, min(c1, cols)):
                    grid[r][cc] = colour[k["block"]]
    text = Text()
    for row in grid:
        for cell in row:
            text.append("█" if cell else "·", style=cell or "grey30")
        text.append("\n")
    table = Table(title=f"{plan.model}: {plan.replicas} replica(s), "
                        f"{plan.estimate['active_pes']:,} of {plan.estimate['total_pes']:,} PEs")
    for col in ("", "layer", "kernels", "PEs", "share"):
        table.add_column(col, justify="right" if col in ("kernels", "PEs", "share") else "left")
    for b, c, nk, pes, share in legend:
        table.add_row(Text("█", style=c), b, str(nk), f"{pes:,}", f"{share:.2%}")
    return Group(text, table)
