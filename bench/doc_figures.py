"""The CS-2 figures the docs quote, computed from the code (a test compares the docs to them).

    .venv/bin/python bench/doc_figures.py            # print both tables
    .venv/bin/python bench/doc_figures.py --write    # rewrite them in the docs

Three tables, each between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in its page:
  shipped-estimates (docs/compiler.md)  every shipped config compiled as run.py compiles it (its
                                        mode, batch, micro-batches): estimate, bound, Active PEs,
                                        Compute Utilization, what a step runs
  time-to-train (docs/cost-model.md)    GPT-J 6B (the shipped config) and the GPT-NeoX-20B shape
                                        in weight streaming on 1, 2 and 4 CS-2 for 10,000 steps,
                                        a checkpoint every 1,000
  fidelity (docs/cost-model.md)         bench/fidelity.py's cases against the published figures
All figures are CS-2 estimates of this simulator's cost model, not measurements.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cs2sim.runtime.compiler import compile_run  # noqa: E402
from cs2sim.runtime.compiler.report import pe_share  # noqa: E402
from cs2sim.runtime.compiler.timetrain import fmt_duration, for_plan  # noqa: E402
from cs2sim.runtime.modelzoo import WEIGHT_STREAMING_CONFIGS  # noqa: E402
from cs2sim.runtime.params import load_params, validate_params  # noqa: E402
from cs2sim.system.state import ExecMode  # noqa: E402

ZOO = ROOT / "runtime" / "modelzoo"
DOCS = ROOT / "docs"
TTT_STEPS, TTT_EVERY = 10_000, 1_000
SHAPES = (
    ("GPT-J 6B (params_gptj_6b.yaml)", "gptj", ZOO / "gptj" / "configs" / "params_gptj_6b.yaml"),
    (
        "GPT-NeoX-20B shape (bench/fidelity/gpt_neox_20b_b256.yaml)",
        "gpt2",
        ROOT / "bench" / "fidelity" / "gpt_neox_20b_b256.yaml",
    ),
)


def _params(model: str, path: Path, **runconfig: object) -> dict:
    raw = copy.deepcopy(load_params(str(path)))
    raw.setdefault("runconfig", {}).update(runconfig)
    p, _ = validate_params(raw, model, source=path.name)
    return p


def _num(x: float) -> str:
    return f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def shipped_estimates(tmp: Path) -> list[str]:
    """The markdown table of every shipped config's CS-2 estimate."""
    rows = [
        "| config | mode | estimate (samples/s) | bound | Active PEs | Compute Utilization "
        "| micro-batches x size | samples a system | systems |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for d in sorted(ZOO.iterdir()):
        if not (d / "configs").is_dir():
            continue
        for cfg in sorted((d / "configs").glob("*.yaml")):
            ws = cfg.name in WEIGHT_STREAMING_CONFIGS
            p = _params(d.name, cfg)
            r = compile_run(
                d.name,
                p,
                tmp / f"{d.name}_{cfg.stem}",
                mode=ExecMode.WEIGHT_STREAMING if ws else ExecMode.PIPELINED,
                draw_map=False,
            )
            plan, e = r.plan, r.plan.estimate
            systems = f"{plan.replicas} replicas" if plan.replicas > 1 else str(plan.num_csx)
            rows.append(
                f"| {d.name}/{cfg.name} | {'weight streaming' if ws else 'pipelined'} "
                f"| {_num(e['samples_per_sec'])} | {e['bound']} | "
                f"{pe_share(e['active_pes'], e['total_pes'])} | "
                f"{e['compute_utilization']:.0%} | {plan.micro_batches} x "
                f"{plan.micro_batch_size} | {plan.batch_per_system} | {systems} |"
            )
    return rows


def time_to_train_table(tmp: Path) -> list[str]:
    """The markdown table of the real shapes' time to train on 1, 2 and 4 systems."""
    rows = [
        "| model | CS-2 | batch | samples/s | training | checkpoint saves | total |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, model, path in SHAPES:
        for n in (1, 2, 4):
            p = _params(model, path, num_csx=n, max_steps=TTT_STEPS, checkpoint_steps=TTT_EVERY)
            r = compile_run(
                model, p, tmp / f"{model}_{n}", mode=ExecMode.WEIGHT_STREAMING, draw_map=False
            )
            t = for_plan(r.plan, p)
            assert t is not None
            rows.append(
                f"| {label} | {n} | {p['train_input']['batch_size']} | "
                f"{_num(t.samples_per_sec)} | {fmt_duration(t.training_seconds)} | "
                f"{t.checkpoints} x {fmt_duration(t.checkpoint_seconds / t.checkpoints)}"
                f" | {fmt_duration(t.total_seconds)} |"
            )
    return rows


def fidelity_table(tmp: Path) -> list[str]:
    """bench/fidelity.py's cases: published, ours, ratio, bound; and the error summary."""
    sys.path.insert(0, str(ROOT / "bench"))
    import fidelity

    rows = [
        "| case | role | published | ours | ratio | bound | source |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    done = [fidelity.run_case(case, tmp / "fidelity") for case in fidelity.CASES]
    for r in done:
        ours = "-" if r.ours is None else fidelity.fmt(r.ours)
        ratio = "-" if r.ours is None else f"{r.ours / r.case.published:.2f}"
        rows.append(
            f"| {r.case.label} | {r.case.role} | {fidelity.fmt(r.case.published)} | "
            f"{ours} | {ratio} | {r.bound or r.note} | {r.case.source} |"
        )
    rows.append("")
    for role in ("calibration", "held out"):
        got = fidelity.summary(done, role)
        if got:
            rows.append(
                f"{role.capitalize()}: {got[2]} cases, median error {got[0]:.2f}x, "
                f"worst {got[1]:.2f}x."
            )
    return rows


TABLES = {
    "shipped-estimates": (DOCS / "compiler.md", shipped_estimates),
    "time-to-train": (DOCS / "cost-model.md", time_to_train_table),
    "fidelity": (DOCS / "cost-model.md", fidelity_table),
}


def block(name: str, text: str) -> str | None:
    """The lines between a table's markers in `text`, or None when the markers are missing."""
    m = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.S)
    return m.group(1) if m else None


def generate(tmp: Path) -> dict[str, str]:
    """Each table's markdown, as it belongs between its markers."""
    return {name: "\n".join(make(tmp)) + "\n" for name, (_, make) in TABLES.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the tables in the docs")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="doc_figures_") as tmp:
        tables = generate(Path(tmp))
    for name, md in tables.items():
        page = TABLES[name][0]
        print(f"{name} ({page.relative_to(ROOT)}):\n{md}")
        if args.write:
            text = page.read_text()
            if block(name, text) is None:
                print(f"{page.relative_to(ROOT)} has no <!-- {name}:begin/end --> markers")
                return 1
            page.write_text(
                re.sub(
                    rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)",
                    lambda m, md=md: m.group(1) + md + m.group(2),
                    text,
                    flags=re.S,
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
