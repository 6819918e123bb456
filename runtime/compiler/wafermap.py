"""The wafer map: the placement drawn in the terminal (rich) and as a PNG (matplotlib, Agg).

Pipelined: every kernel's rectangle, coloured by its model block (one hue per layer, as
Fig. 14 of Cerebras' Pipelined Execution page, docs/sources.md) and shaded per kernel inside the
block, each outlined, so kernels are told apart;
a legend of block, kernels, PEs and share of the wafer; when the model covers a small corner of
the wafer, a zoomed inset of that corner names each kernel. Weight streaming: the whole wafer
runs one layer at a time, so the picture is the per-layer timeline of one micro-batch (forward
and backward: compute, streaming, the fixed cost of the pass). matplotlib is imported only when a
PNG is drawn; the PNG is cut to its drawing (bbox "tight"), so no label is clipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cs2sim.runtime.compiler.plan import Plan
from cs2sim.runtime.compiler.report import pe_share
from cs2sim.system.hardware import WaferSpec

__all__ = [
    "save_png",
    "render_rich",
    "block_legend",
    "kernel_colours",
    "PALETTE",
    "inset_box",
    "title",
    "share_text",
]

# distinct colours, cycled (rich accepts the hex form too)
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
    "#e6550d",
    "#31a354",
    "#756bb1",
    "#636363",
)
MIN_ZOOM = 2.0  # an inset only where it shows the kernels at least twice as large


def block_legend(plan: Plan) -> list[tuple[str, str, int, int, float]]:
    """(block, colour, kernels, PEs over all replicas, share of the wafer) in order."""
    total = plan.estimate["total_pes"]
    rows: dict[str, list[int]] = {}
    for k in plan.kernels:
        r = rows.setdefault(k["block"], [0, 0])
        r[0] += 1
        r[1] += k["pes"] * k["replicas"]
    return [
        (b, PALETTE[i % len(PALETTE)], n, pes, pes / total)
        for i, (b, (n, pes)) in enumerate(rows.items())
    ]


def kernel_colours(plan: Plan) -> list[tuple[float, float, float]]:
    """One RGB per kernel: its block's hue, lighter or darker by its place in the block."""
    from matplotlib.colors import to_rgb

    hue = {b: to_rgb(c) for b, c, *_ in block_legend(plan)}
    count: dict[str, int] = {}
    for k in plan.kernels:
        count[k["block"]] = count.get(k["block"], 0) + 1
    seen: dict[str, int] = {}
    out = []
    for k in plan.kernels:
        i = seen.get(k["block"], 0)
        seen[k["block"]] = i + 1
        n = count[k["block"]]
        t = 0.0 if n == 1 else i / (n - 1) - 0.5  # -0.5 .. 0.5 across the block
        base = hue[k["block"]]
        if t >= 0:  # mix toward white
            rgb = tuple(c + (1 - c) * 0.55 * t * 2 for c in base)
        else:  # toward black
            rgb = tuple(c * (1 + 0.45 * t * 2) for c in base)
        out.append((float(rgb[0]), float(rgb[1]), float(rgb[2])))
    return out


def _frame(plan: Plan, replicas: int | None) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) around the first `replicas` copies' rectangles (None: all)."""
    xs = [(x, y, x + w, y + h) for k in plan.kernels for x, y, w, h in k["rects"][:replicas]]
    return (
        min(b[0] for b in xs),
        min(b[1] for b in xs),
        max(b[2] for b in xs),
        max(b[3] for b in xs),
    )


def _inset(
    plan: Plan, wafer: WaferSpec
) -> tuple[tuple[int, int, int, int], tuple[float, float, float, float]] | None:
    """(the frame an inset zooms into, where on the axes it goes) or None when it would not
    magnify. The frame is the first replica's kernels (the others are copies); the inset goes
    in the largest empty strip beside or below ALL the kernels, and is drawn only when it shows
    that frame at least MIN_ZOOM times larger than the map does (the frame of a tall replica
    strip would otherwise be the whole wafer height again)."""
    if not plan.kernels:
        return None
    x0, y0, x1, y1 = _frame(plan, 1)
    pad = max(2, (max(x1 - x0, y1 - y0)) // 20)
    box = (
        max(0, x0 - pad),
        max(0, y0 - pad),
        min(wafer.width, x1 + pad),
        min(wafer.height, y1 + pad),
    )
    where = _free_corner(_frame(plan, None), wafer)
    _, _, fw, fh = where  # axes fractions of the strip
    zoom = min(
        fw * wafer.width / max(1, box[2] - box[0]), fh * wafer.height / max(1, box[3] - box[1])
    )
    return (box, where) if zoom >= MIN_ZOOM else None


def inset_box(plan: Plan, wafer: WaferSpec) -> tuple[int, int, int, int] | None:
    """(x0, y0, x1, y1) of the frame a zoomed inset shows, or None when no inset magnifies."""
    got = _inset(plan, wafer)
    return None if got is None else got[0]


def share_text(pes: int, total: int) -> str:
    """A kernel's or block's share of the wafer: a percentage with 3 significant digits, or the
    count itself when that would read 0.00% (a 1-PE kernel is "1 of 753,972")."""
    if 100 * pes / total < 0.01:
        return f"{pes:,} of {total:,}"
    return f"{100 * pes / total:.3g}%"


def title(plan: Plan, wafer: WaferSpec | None = None) -> str:
    """The map's title: the model, what a step runs (as compile_report.txt says it) and the
    estimate."""
    e = plan.estimate
    if plan.kernels:
        from cs2sim.system.hardware import WSE2

        wafer = wafer or WSE2
        return (
            f"{plan.model}: pipelined placement on {wafer.name}, "
            f"{pe_share(e['active_pes'], e['total_pes'])} of PEs, {plan.replicas} "
            f"replica(s)\n{plan.batch_line()}\nCS-2 estimate "
            f"{e['samples_per_sec']:,.0f} samples/s, {e['bound']} bound, "
            f"{e.get('ports_used', 0):g} of {wafer.ports} ports"
        )
    return (
        f"{plan.model}: weight-streaming schedule, {plan.num_csx} CS-X\n"
        f"{plan.batch_line()}\nCS-2 estimate {e['samples_per_sec']:,.1f} samples/s, "
        f"{e['bound']} bound"
    )


def _free_corner(
    box: tuple[int, int, int, int], wafer: WaferSpec
) -> tuple[float, float, float, float]:
    """Axes-fraction bounds of the empty part of the wafer beside or below the kernels."""
    _, _, x1, y1 = box
    below = (wafer.height - y1) / wafer.height  # share of the height free under the kernels
    right = (wafer.width - x1) / wafer.width
    m = 0.04
    if below >= right:  # y is drawn downward: axes fraction 0 is the wafer's bottom row
        return (m, m, 1 - 2 * m, below - 2 * m)
    return (1 - right + m, m, right - 2 * m, 1 - 2 * m)


def _draw_kernels(ax: Any, plan: Plan, colours: list[Any], labels: bool, box: Any) -> None:
    from matplotlib.patches import Rectangle

    x0, y0, x1, y1 = box
    span = max(x1 - x0, y1 - y0)
    for k, rgb in zip(plan.kernels, colours, strict=True):
        for j, (x, y, w, h) in enumerate(k["rects"]):
            ax.add_patch(Rectangle((x, y), w, h, facecolor=rgb, edgecolor="#202020", linewidth=0.4))
            # a kernel's name where its rectangle is big enough on this view
            if labels and j == 0 and min(w, h) >= span / 14:
                ax.text(
                    x + w / 2,
                    y + h / 2,
                    k["name"].split(".")[-1] if "." in k["name"] else k["name"],
                    ha="center",
                    va="center",
                    fontsize=6,
                    clip_on=True,
                )


def _pipelined(plan: Plan, wafer: WaferSpec) -> Any:
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    fig = Figure(figsize=(7.5, 8.5))
    ax = fig.add_subplot()
    colours = kernel_colours(plan)
    ax.add_patch(
        Rectangle(
            (0, 0),
            wafer.width,
            wafer.height,
            facecolor="#f2f2f2",
            edgecolor="#808080",
            linewidth=0.8,
        )
    )
    whole = (0, 0, wafer.width, wafer.height)
    _draw_kernels(ax, plan, colours, True, whole)
    ax.set_xlim(0, wafer.width)
    ax.set_ylim(wafer.height, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("x (PE)")
    ax.set_ylabel("y (PE)")
    got = _inset(plan, wafer)
    if got is not None:
        box, where = got
        bx0, by0, bx1, by1 = box
        ins = ax.inset_axes(where)
        ins.add_patch(Rectangle((bx0, by0), bx1 - bx0, by1 - by0, facecolor="#f2f2f2"))
        _draw_kernels(ins, plan, colours, True, box)
        ins.set_xlim(bx0, bx1)
        ins.set_ylim(by1, by0)
        ins.set_aspect("equal")
        ins.tick_params(labelsize=6)
        ins.set_title(f"zoom: x {bx0}-{bx1}, y {by0}-{by1}", fontsize=7)
        ax.indicate_inset_zoom(ins, edgecolor="#202020")
    legend = block_legend(plan)
    total = plan.estimate["total_pes"]
    handles = [
        Patch(
            color=c,
            label=f"{b}: {n} kernel{'s' if n > 1 else ''}, {pes:,} PE"
            f"{'s' if pes > 1 else ''} ({share_text(pes, total)})",
        )
        for b, c, n, pes, _ in legend[:24]
    ]
    if len(legend) > 24:
        handles.append(Patch(color="white", label=f"... {len(legend) - 24} more blocks"))
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        fontsize=7,
        title=f"{plan.replicas} replica(s); shades: kernels of a block",
        title_fontsize=7,
    )
    ax.set_title(title(plan, wafer), fontsize=9)
    return fig


def _streaming(plan: Plan) -> Any:
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    n = len(plan.layers)
    fig = Figure(figsize=(9, min(14.0, 0.14 * n + 2.5)))
    ax = fig.add_subplot()
    names = [ly["name"] for ly in plan.layers]
    # forward in order, then backward in reverse order: start times in ms
    starts_f, starts_b, t = [], [0.0] * n, 0.0
    for ly in plan.layers:
        starts_f.append(t * 1e3)
        t += ly["fwd_seconds"]
    for i in reversed(range(n)):
        starts_b[i] = t * 1e3
        t += plan.layers[i]["bwd_seconds"]
    y = list(range(n))
    # one LineCollection per series (hlines): fast for a hundred layers; each row shows the
    # fixed cost first, then compute and the stream it overlaps
    for starts, part, col, dy in (
        (starts_f, "fixed_seconds", "#7f7f7f", 0.0),
        (starts_b, "fixed_seconds", "#7f7f7f", 0.0),
    ):
        ends = [s0 + 1e3 * ly[part] for s0, ly in zip(starts, plan.layers, strict=True)]
        ax.hlines([v + dy for v in y], starts, ends, colors=col, linewidth=3)
    for starts, key, col, dy in (
        (starts_f, "fwd_compute_seconds", "#1f77b4", 0.0),
        (starts_f, "fwd_stream_seconds", "#ff7f0e", 0.35),
        (starts_b, "bwd_compute_seconds", "#2ca02c", 0.0),
        (starts_b, "bwd_stream_seconds", "#d62728", 0.35),
    ):
        s0 = [s + 1e3 * ly["fixed_seconds"] for s, ly in zip(starts, plan.layers, strict=True)]
        ends = [a + 1e3 * ly[key] for a, ly in zip(s0, plan.layers, strict=True)]
        ax.hlines([v + dy for v in y], s0, ends, colors=col, linewidth=3)
    step = max(1, n // 40)  # at most ~40 labels
    ax.set_yticks(y[::step], names[::step], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("time in one micro-batch pass over all layers (ms, CS-2 estimate)")
    ax.legend(
        handles=[
            Patch(color="#7f7f7f", label="fixed cost of the pass"),
            Patch(color="#1f77b4", label="forward compute"),
            Patch(color="#ff7f0e", label="forward weight stream"),
            Patch(color="#2ca02c", label="backward compute"),
            Patch(color="#d62728", label="backward weights + gradients"),
        ],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
    )
    ax.set_title(title(plan), fontsize=9)
    return fig


def save_png(plan: Plan, path: Path, wafer: WaferSpec) -> Path:
    """Draw the wafer map (pipelined) or the layer timeline (weight streaming) into `path`."""
    # the object API with the Agg canvas: no pyplot (its import and global state are not needed)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = _pipelined(plan, wafer) if plan.kernels else _streaming(plan)
    path = Path(path)
    FigureCanvasAgg(fig)  # attaches the Agg canvas: savefig draws without pyplot
    fig.savefig(path, dpi=100, bbox_inches="tight", pad_inches=0.15)
    return path


def render_rich(plan: Plan, wafer: WaferSpec, cols: int = 64) -> Any:
    """A rich renderable: the wafer as a grid of coloured cells plus the legend table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if not plan.kernels:
        table = Table(
            title=f"{plan.model}: weight-streaming layer schedule (CS-2 estimate); "
            f"{plan.batch_line()}"
        )
        for col in (
            "layer",
            "forward ms",
            "backward ms",
            "fixed ms",
            "forward bound",
            "backward bound",
        ):
            table.add_column(col, justify="left" if col == "layer" or "bound" in col else "right")
        for ly in plan.layers:
            table.add_row(
                ly["name"],
                f"{ly['fwd_seconds'] * 1e3:.3f}",
                f"{ly['bwd_seconds'] * 1e3:.3f}",
                f"{ly['fixed_seconds'] * 1e3:.3f}",
                ly["fwd_bound"],
                ly["bwd_bound"],
            )
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
    table = Table(
        title=f"{plan.model}: {plan.replicas} replica(s), "
        f"{plan.estimate['active_pes']:,} of {plan.estimate['total_pes']:,} PEs"
    )
    for col in ("", "layer", "kernels", "PEs", "share"):
        table.add_column(col, justify="right" if col in ("kernels", "PEs", "share") else "left")
    for b, c, nk, pes, _ in legend:
        table.add_row(
            Text("█", style=c), b, str(nk), f"{pes:,}", share_text(pes, plan.estimate["total_pes"])
        )
    return Group(text, table)
