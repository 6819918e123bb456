"""Fidelity of the CS-2 cost model: our estimates against published measurements of real runs.

    .venv/bin/python bench/fidelity.py            # the table; writes bench/results/fidelity.md
    .venv/bin/python bench/fidelity.py --fit      # re-derive the calibrated parameters

Every case is compiled the way `run.py --mode=compile_only` compiles it (runtime/compiler), from
a params YAML in bench/fidelity/ (GPT-2 / GPT-3 shapes through the `gpt2` model, GPT-J through
`gptj`, fc_mnist through its own; BERT and LLaMA only when a `bert` / `llama` model is
registered, else skipped with a note). Roles:

  calibration  the runs of docs/cost-model.md's table: they set the parameters of calibration.py and
  are
               scored (target: each within 1.5x, median within 1.25x)
  held out     other published CS-2 runs (other sizes, batch sizes, numbers of CS-2): NOT used
               to set anything; scored separately
  reference    figures shown for comparison, not scored

The pipelined calibration rows are the real compiler's own estimates (no wafer-side pipelined
measurement is published): fc_mnist's sets PIPE_OP_CYCLES, GPT-2 small's PIPE_PEAK_SHARE.

Error of a case = max(ours / published, published / ours). These are CS-2 estimates against
published figures; the compile times printed are host measurements.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cs2sim.runtime.compiler import calibration, compile_run  # noqa: E402
from cs2sim.runtime.compiler.io import InputCluster  # noqa: E402
from cs2sim.runtime.params import load_params, validate_params  # noqa: E402
from cs2sim.runtime.registry import names as model_names  # noqa: E402
from cs2sim.system.state import ExecMode  # noqa: E402

HERE = ROOT / "bench" / "fidelity"
OUT = ROOT / "bench" / "results" / "fidelity.md"
P, W = ExecMode.PIPELINED, ExecMode.WEIGHT_STREAMING
REF_NODES = 5  # ALCF: csrun_wse "By default it reserves five entire worker nodes"


@dataclass(frozen=True)
class Case:
    """One published figure and how to compile the run behind it."""

    label: str
    model: str
    yaml: str
    mode: ExecMode
    published: float
    source: str
    role: str  # "calibration" | "held out" | "reference"
    ref_input: bool = False  # model the reference cluster's input workers (calibration.py)


CASES = (
    Case(
        "fc_mnist TF b256, 1 CS-2 (measured)",
        "fc_mnist",
        "fc_mnist_tf_b256.yaml",
        P,
        358_417.08,
        "ALCF ai-testbed userdocs, Model Zoo R1.1",
        "calibration",
        ref_input=True,
    ),
    Case(
        "fc_mnist TF b256, 1 CS-2 (the real compiler's estimate)",
        "fc_mnist",
        "fc_mnist_tf_b256.yaml",
        P,
        1_270_553,
        "ALCF ai-testbed userdocs, R1.1 compile report (Active PEs 0%, utilization 74%)",
        "calibration",
    ),
    Case(
        "GPT-2 small s1024 b32, pipelined (the real compiler's estimate)",
        "gpt2",
        "gpt2_small_pipelined_r16.yaml",
        P,
        860.3,
        "PSC Neocortex compile_report.txt, R1.6.0 (Active PEs 92%, utilization 85%)",
        "calibration",
    ),
    Case(
        "GPT-2 small b112 s2048, 1 CS-2",
        "gpt2",
        "gpt2_small_b112.yaml",
        W,
        494.5,
        "ALCF AI-science training series, R2.1.1",
        "calibration",
    ),
    Case(
        "Cerebras-GPT 256M b128 s2048, 1 CS-2",
        "gpt2",
        "cerebras_gpt_256m_b128.yaml",
        W,
        373,
        "Zhang et al., HPEC 2024, Table V",
        "calibration",
    ),
    Case(
        "Cerebras-GPT 590M b128 s2048, 1 CS-2",
        "gpt2",
        "cerebras_gpt_590m_b128.yaml",
        W,
        199,
        "Zhang et al., HPEC 2024, Table V",
        "calibration",
    ),
    Case(
        "Cerebras-GPT 2.7B b128 s2048, 1 CS-2",
        "gpt2",
        "cerebras_gpt_2p7b_b128.yaml",
        W,
        46.6,
        "Zhang et al., HPEC 2024, Table V",
        "calibration",
    ),
    Case(
        "BERT-large s128 b2048, 1 CS-2",
        "bert",
        "bert_large_msl128_b2048.yaml",
        W,
        6728,
        "ALCF training-series homework logs, R2.1.1",
        "calibration",
    ),
    Case(
        "GPT-J 6B b66 s2048, 1 CS-2",
        "gptj",
        "gptj_6b_b66.yaml",
        W,
        19.8,
        "ALCF AI-science training series gpt-j.md, 2023-11-10",
        "held out",
    ),
    Case(
        "GPT-J 6B b120 s2048, 2 CS-2",
        "gptj",
        "gptj_6b_b120_2csx.yaml",
        W,
        43.7,
        "ALCF user-guides example-programs.md, 2023-11-29, R2.1.1",
        "held out",
    ),
    Case(
        "BERT-large s128 b1024, 1 CS-2",
        "bert",
        "bert_large_msl128_b1024.yaml",
        W,
        4047.95,
        "ALCF user-guides example-programs.md, 2023-11-29, R2.1.1",
        "held out",
    ),
    Case(
        "LLaMA-7B b99 s2048, 1 CS-2",
        "llama",
        "llama_7b_b99.yaml",
        W,
        20.46,
        "ALCF user-guides example-programs.md, 2024-03-21, R2.1.1",
        "held out",
    ),
)


def load(case: Case) -> dict:
    """Validated params of a case's YAML."""
    raw = load_params(str(HERE / case.yaml))
    p, _ = validate_params(copy.deepcopy(raw), case.model, source=case.yaml)
    return p


def ref_cluster(p: dict, model: str) -> InputCluster:
    """The reference cluster's input workers: 5 nodes at REF_INPUT_NODE_BYTES_S each."""
    from cs2sim.runtime.compiler.graph import extract_graph
    from cs2sim.runtime.compiler.placement import wafer_sample_bytes
    from cs2sim.runtime.numerics.mixed_precision import resolve_precision

    half, _ = resolve_precision(copy.deepcopy(p))
    per_sample = wafer_sample_bytes(extract_graph(model, p, half))
    return InputCluster(
        REF_NODES,
        calibration.REF_INPUT_NODE_BYTES_S / per_sample,
        "reference cluster (calibration.py REF_INPUT_NODE_BYTES_S)",
    )


@dataclass
class Row:
    case: Case
    ours: float | None
    bound: str = ""
    detail: str = ""
    seconds: float = 0.0
    note: str = ""

    @property
    def error(self) -> float | None:
        if self.ours is None:
            return None
        r = self.ours / self.case.published
        return max(r, 1 / r)


def run_case(case: Case, tmp: Path) -> Row:
    """Compile one case; a Row with our estimate, or with the note why it was skipped."""
    if case.model not in model_names():
        return Row(case, None, note=f"skipped: no `{case.model}` model is registered yet")
    try:
        p = load(case)
    except Exception as e:  # noqa: BLE001 - a model of another issue may read its YAML otherwise
        return Row(case, None, note=f"skipped: {case.yaml} does not load: {e}")
    ic = ref_cluster(p, case.model) if case.ref_input else None
    t = time.perf_counter()
    r = compile_run(
        case.model,
        p,
        tmp / case.yaml.replace(".yaml", "") / case.role[:3],
        mode=case.mode,
        draw_map=False,
        input_cluster=ic,
    )
    took = time.perf_counter() - t
    plan = r.plan
    assert plan is not None
    e = plan.estimate
    ours = e["samples_per_sec"] if case.role != "reference" else e["wafer_samples_per_sec"]
    if plan.layers:
        detail = (
            f"{plan.micro_batches} x {plan.micro_batch_size} per CS-X, "
            f"{e['compute_utilization']:.0%} of peak"
        )
    else:
        detail = (
            f"{e['ports_used']:g} port(s), Active PEs {e['active_pes'] / e['total_pes']:.2%}"
            f", utilization {e['compute_utilization']:.0%}"
            + (
                f"; 5 input nodes x {ic.per_worker_samples_per_sec:,.0f}; kernels sized to them"
                if ic
                else ""
            )
        )
    return Row(case, ours, e["bound"] if case.role != "reference" else "wafer", detail, took)


def summary(rows: list[Row], role: str) -> tuple[float, float, int] | None:
    errs = [r.error for r in rows if r.case.role == role and r.error is not None]
    if not errs:
        return None
    return statistics.median(errs), max(errs), len(errs)


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def render(rows: list[Row], compile_s: float) -> str:
    lines = [
        "# Fidelity of the CS-2 cost model",
        "",
        "Generated by `.venv/bin/python bench/fidelity.py` (CS-2 estimates of this "
        "simulator's compiler against published figures of real CS-2 runs; ratio = ours / "
        "published; error = the larger of ratio and 1/ratio).",
        "",
        "| case | role | published | ours | ratio | bound | detail | source |",
        "|---|---|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        ratio = "-" if r.ours is None else f"{r.ours / r.case.published:.2f}"
        lines.append(
            f"| {r.case.label} | {r.case.role} | {fmt(r.case.published)} | "
            f"{fmt(r.ours)} | {ratio} | {r.bound or '-'} | "
            f"{r.detail or r.note} | {r.case.source} |"
        )
    lines.append("")
    for role, target in (
        ("calibration", "target: each within 1.5x, median within 1.25x"),
        ("held out", "not used to set any parameter"),
    ):
        s = summary(rows, role)
        if s:
            lines.append(
                f"- **{role}** ({s[2]} cases, {target}): median error "
                f"{s[0]:.2f}x, worst {s[1]:.2f}x"
            )
    skipped = [r for r in rows if r.ours is None]
    for r in skipped:
        lines.append(f"- {r.case.label}: {r.note}")
    lines += [
        "",
        "## The calibrated parameters (runtime/compiler/calibration.py)",
        "",
        "| name | value | set from |",
        "|---|---:|---|",
    ]
    for name, value, unit, source in calibration.PARAMETERS:
        lines.append(f"| {name} | {value:g} {unit} | {source} |")
    lines += [
        "",
        "Notes:",
        "",
        "- The fc_mnist measured row models the reference cluster's 5 input nodes with "
        "REF_INPUT_NODE_BYTES_S, which was set from that very row: it checks the "
        "arithmetic, not the model. The two compiler-estimate rows set PIPE_OP_CYCLES "
        "(fc_mnist) and PIPE_PEAK_SHARE (GPT-2 small pipelined), one each; what checks "
        "the pipelined model is what was not fitted: Active PEs and Compute Utilization "
        "(detail column) against the real reports' 0% / 74% (fc_mnist) and 92% / 85% "
        "(GPT-2 small). No held-out pipelined run is published that we know of.",
        "- GPT-J 6B on 2 CS-2 ran at 27.5 (R1.7.1), 34.0 (R1.9.2) and 43.7 samples/s "
        "(R2.1.1) in ALCF's logs of the same example: software releases alone moved it "
        "1.6x, which bounds how close any hardware model can be.",
        f"- Host measurement: the {len([r for r in rows if r.ours is not None])} compiles "
        f"took {compile_s:.2f} s in all on this machine.",
        "",
    ]
    return "\n".join(lines)


def fit() -> int:
    """Least squares on log(ours / published) over the weight-streaming calibration cases."""
    import numpy as np

    import cs2sim.runtime.compiler.cost as cost
    import cs2sim.runtime.compiler.streaming as streaming
    from cs2sim.runtime.compiler.graph import extract_graph
    from cs2sim.runtime.compiler.kernels import match_kernels
    from cs2sim.runtime.numerics.mixed_precision import resolve_precision
    from cs2sim.system.hardware import WSE2

    prepared = []
    for case in CASES:
        if case.role != "calibration" or case.mode != W or case.model not in model_names():
            continue
        p = load(case)
        half, _ = resolve_precision(copy.deepcopy(p))
        g = extract_graph(case.model, p, half)
        n = int((p.get("runconfig") or {}).get("num_csx") or 1)
        prepared.append((case, g, match_kernels(g), n))
    best = None
    for share in np.arange(0.20, 0.80, 0.01):
        for tpass in np.arange(0.0, 8.0e-3, 1.0e-4):
            cost.KERNEL_PEAK_SHARE, streaming.LAYER_PASS_SECONDS = float(share), float(tpass)
            err = 0.0
            for case, g, matches, n in prepared:
                c = cost.op_costs(g, matches, WSE2)
                s = streaming.plan_streaming(g, c, WSE2, n).estimate.samples_per_sec
                err += math.log(s / case.published) ** 2
            if best is None or err < best[0]:
                best = (err, float(share), float(tpass))
    assert best is not None
    cost.KERNEL_PEAK_SHARE, streaming.LAYER_PASS_SECONDS = best[1], best[2]
    fit_pipelined()
    print(
        f"best fit over {len(prepared)} weight-streaming calibration cases: "
        f"KERNEL_PEAK_SHARE = {best[1]:.2f}, LAYER_PASS_SECONDS = {best[2]:.1e} "
        f"(sum of squared log errors {best[0]:.4f})"
    )
    print(
        "REF_INPUT_NODE_BYTES_S = 358,417.08 samples/s x 1,572 B / 5 nodes = "
        f"{358_417.08 * 1572 / REF_NODES:.4g} B/s (fc_mnist TF b256 measured)"
    )
    return 0


def _pipe_rate(g, matches, ic=None) -> float:
    """The pipelined estimate of one graph with the parameters cost.py holds now."""
    import cs2sim.runtime.compiler.cost as cost
    from cs2sim.runtime.compiler.estimate import estimate_pipelined
    from cs2sim.runtime.compiler.placement import place_pipelined
    from cs2sim.system.hardware import WSE2

    c = cost.op_costs(g, matches, WSE2)
    return estimate_pipelined(g, c, place_pipelined(g, c, WSE2), WSE2).samples_per_sec


def fit_pipelined() -> None:
    """PIPE_PEAK_SHARE from GPT-2 small pipelined (long vectors: the share sets its rate),
    PIPE_OP_CYCLES from fc_mnist's compiler estimate (GEMVs: the knee sets its rate); each
    solved by bisection on log(ours / published) with the other held, alternated to a fixed
    point (each run hardly moves the other's figure)."""
    import cs2sim.runtime.compiler.cost as cost
    from cs2sim.runtime.compiler.graph import extract_graph
    from cs2sim.runtime.compiler.kernels import match_kernels
    from cs2sim.runtime.numerics.mixed_precision import resolve_precision

    cases = {
        c.model: c for c in CASES if c.mode == P and c.role == "calibration" and not c.ref_input
    }
    graphs = {}
    for model, case in cases.items():
        p = load(case)
        half, _ = resolve_precision(copy.deepcopy(p))
        g = extract_graph(model, p, half)
        graphs[model] = (g, match_kernels(g), case.published)

    def solve(attr: str, model: str, lo: float, hi: float, rising: bool) -> float:
        g, m, want = graphs[model]
        for _ in range(40):
            mid = math.sqrt(lo * hi)
            setattr(cost, attr, mid)
            fast = _pipe_rate(g, m) > want
            if fast == rising:
                hi = mid
            else:
                lo = mid
        setattr(cost, attr, math.sqrt(lo * hi))
        return math.sqrt(lo * hi)

    for _ in range(4):
        share = solve("PIPE_PEAK_SHARE", "gpt2", 0.01, 1.0, True)
        op = solve("PIPE_OP_CYCLES", "fc_mnist", 0.1, 1000.0, False)
    print(
        f"pipelined: PIPE_PEAK_SHARE = {share:.3f} (GPT-2 small pipelined R1.6, 860.3 "
        f"samples/s), PIPE_OP_CYCLES = {op:.1f} (fc_mnist TF b256, the R1.1 compiler's "
        "1,270,553 samples/s)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="re-derive the calibrated parameters")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    if args.fit:
        return fit()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fidelity_") as tmp:
        for case in CASES:
            rows.append(run_case(case, Path(tmp)))
    compile_s = sum(r.seconds for r in rows)
    print(f"{'case':<52}{'role':<13}{'published':>12}{'ours':>12}{'ratio':>7}  bound")
    for r in rows:
        if r.ours is None:
            print(
                f"{r.case.label:<52}{r.case.role:<13}{fmt(r.case.published):>12}"
                f"{'-':>12}{'-':>7}  {r.note}"
            )
            continue
        print(
            f"{r.case.label:<52}{r.case.role:<13}{fmt(r.case.published):>12}"
            f"{fmt(r.ours):>12}{r.ours / r.case.published:>7.2f}  {r.bound} ({r.detail})"
        )
    for role in ("calibration", "held out"):
        s = summary(rows, role)
        if s:
            print(f"{role}: {s[2]} cases, median error {s[0]:.2f}x, worst {s[1]:.2f}x")
    if not args.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(render(rows, compile_s))
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
