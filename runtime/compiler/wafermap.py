"""The wafer map: the placement drawn in the terminal (rich) and as a PNG (matplotlib, Agg).

Pipelined: every kernel's rectangle coloured by its model block (one colour per layer, as the
seed's Fig. 14), with a legend of block, kernels, PEs and share of the wafer. Weight streaming:
the whole wafer runs one layer at a time, so the picture is the per-layer timeline (forward and
backward, compute vs streaming). matplotlib is imported only when a PNG is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.compiler.plan import Plan
from system.hardware import WaferSpec

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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    if plan.kernels:
        fig, ax = plt.subplots(figsize=(7, 8.5))
        colour = {b: c for b, c, *_ in block_legend(plan)}
        ax.add_patch(Rectangle((0, 0), wafer.width, wafer.height, facecolor="#f2f2f2",
                               edgecolor="black", linewidth=0.8))
        for k in plan.kernels:
            for x, y, w, h in k["rects"]:
                ax.add_patch(Rectangle((x, y), w, h, facecolor=colour[k["block"]],
                                       edgecolor="white", linewidth=0.2))
        ax.set_xlim(0, wafer.width)
        ax.set_ylim(wafer.height, 0)
        ax.set_aspect("equal")
        ax.set_xlabel("x (PE)")
        ax.set_ylabel("y (PE)")
        legend = block_legend(plan)
        handles = [Patch(color=c, label=f"{b}: {pes:,} PEs ({share:.2%})")
                   for b, c, _, pes, share in legend[:24]]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7,
                  title=f"{plan.replicas} replica(s)")
        ax.set_title(f"{plan.model}: pipelined placement on {wafer.name} "
                     f"({plan.estimate['active_pes'] / plan.estimate['total_pes']:.1%} of PEs)")
    else:
        fig, ax = plt.subplots(figsize=(9, 0.25 * len(plan.layers) + 2))
        t = 0.0
        names = []
        for i, ly in enumerate(plan.layers):
            names.append(ly["name"])
            ax.barh(i, ly["fwd_compute_seconds"] * 1e3, left=t * 1e3, color="#1f77b4", height=0.4)
            ax.barh(i + 0.4, ly["fwd_stream_seconds"] * 1e3, left=t * 1e3, color="#ff7f0e",
                    height=0.4)
            t += ly["fwd_seconds"]
        for i, ly in reversed(list(enumerate(plan.layers))):
            ax.barh(i, ly["bwd_compute_seconds"] * 1e3, left=t * 1e3, color="#2ca02c", height=0.4)
            ax.barh(i + 0.4, ly["bwd_stream_seconds"] * 1e3, left=t * 1e3, color="#d62728",
                    height=0.4)
            t += ly["bwd_seconds"]
        ax.set_yticks(range(len(names)), names, fontsize=6)
        ax.invert_yaxis()
        ax.set_xlabel("time in one step (ms, CS-2 estimate)")
        ax.legend(handles=[Patch(color="#1f77b4", label="forward compute"),
                           Patch(color="#ff7f0e", label="forward weight stream"),
                           Patch(color="#2ca02c", label="backward compute"),
                           Patch(color="#d62728", label="backward weights + gradients")],
                  fontsize=7, loc="lower right")
        ax.set_title(f"{plan.model}: weight-streaming schedule, {plan.num_csx} CS-X")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
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
