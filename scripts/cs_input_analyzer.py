"""cs_input_analyzer: compile, measure the input pipeline on real worker processes, recommend.

    cs_input_analyzer [--available-nodes N] [--mount-dirs DIRS] [--output-format text|json]
                      [--target-samples-per-sec R] [--threads 12,16,20] [--measure-seconds S]
                      python run.py --mode=validate_only|compile_only ...

The console script: its flags (the real script's spelling, `--flag value` and `--flag=value`),
its help, and its one error boundary. The analysis is runtime/cli/input_analyzer.py; what it
prints (progress and the text report) is runtime/cli/analyzer_report.py.
"""

from __future__ import annotations

import json
import math
import re
import sys

from cs2sim.runtime.cli.analyzer_report import TextProgress, render
from cs2sim.runtime.cli.input_analyzer import (
    THREADS,
    AnalyzerError,
    Options,
    analyze,
    site_facts,
    system_ip,
)
from cs2sim.system import knobs

USAGE = (
    "Usage: cs_input_analyzer [--help] [--available-nodes] [--mount-dirs] "
    "command_for_validate_compile"
)

HELP = f"""{USAGE}
Description:
    Analyzes your input pipeline after completing a compile or validation. It compiles the
    model of the given run.py command, then measures the model's input pipeline on real input
    worker processes of this host at several thread and worker counts, and reports the
    recommended Slurm configuration (nodes, tasks_per_node, cpus_per_task) for csrun_wse with
    the input performance it expects.
    Note that the quality of the recommendation improves if a full compile
    (--mode=compile_only) is performed instead of validate-only: only a full compile estimates
    the samples/s the CS-2 needs.
Arguments:
    command_for_validate_compile   A Python command to initiate a full-compile or
                                   validation-only (python, python-ws or python-pt run.py
                                   --mode=compile_only|validate_only ...).
    --available-nodes              (Optional) Number of worker nodes the recommendation may use.
                                   Default: the site's default node count ({{nodes}}).
    --mount-dirs                   (Optional) Comma-separated paths the input reads, checked
                                   to exist (the data must be on a shared file system).
    --output-format                (Optional) text (default) or json.
    --target-samples-per-sec       (Optional) Size for this rate instead of the compile's
                                   estimate (e.g. after validate-only).
    --threads                      (Optional) Thread counts to measure (default 12,16,20).
    --measure-seconds              (Optional) Length of each measurement (default 1.0, or
                                   $CS2_ANALYZER_SECONDS).
Example usage (in a model's directory, e.g. a copy of the Model Zoo's fc_mnist):
    cs_input_analyzer --available-nodes=3 python run.py --mode=validate_only --cs_ip={{ip}}
    cs_input_analyzer --mount-dirs="$PWD" python run.py --mode=compile_only
The report ends with the csrun_wse line that trains on the CS-2 with the recommendation
(with --cs_ip; without it run.py would train on the host CPU).
"""


# -- the command line ------------------------------------------------------------------------------
FLAGS = {
    "--available-nodes": "available_nodes",
    "--mount-dirs": "mount_dirs",
    "--output-format": "output",
    "--target-samples-per-sec": "target",
    "--threads": "threads",
    "--measure-seconds": "seconds",
}


def parse_args(argv: list[str]) -> Options | None:
    """Our flags up to the command (both `--flag value` and `--flag=value`); None: --help."""
    got: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            return None
        name, eq, value = arg.partition("=")
        if name in FLAGS:
            if not eq:
                if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                    raise AnalyzerError(f'"{name}" requires a non-empty argument')
                value = argv[i + 1]
                i += 1
            if not value:
                raise AnalyzerError(f'"{name}" requires a non-empty argument')
            got[FLAGS[name]] = value
            i += 1
            continue
        if arg.startswith("-"):
            raise AnalyzerError(f"unknown option {arg}; run cs_input_analyzer --help")
        break
    command = argv[i:]
    if not command:
        raise AnalyzerError(f"no command to analyze; {USAGE[7:]}")

    def integer(key: str, flag: str) -> int | None:
        if key not in got:
            return None
        if not re.fullmatch(r"[0-9]+", got[key]) or int(got[key]) < 1:
            raise AnalyzerError(f'"{flag}" requires a positive integer argument, not {got[key]!r}')
        return int(got[key])

    def number(key: str, flag: str) -> float | None:
        if key not in got:
            return None
        try:
            value = float(got[key])
        except ValueError:
            value = -1.0
        if not value > 0 or math.isinf(value):
            raise AnalyzerError(f'"{flag}" requires a positive number, not {got[key]!r}')
        return value

    site_seconds = knobs.number("CS2_ANALYZER_SECONDS", 1.0)  # a site's default, if positive
    site_seconds = site_seconds if 0 < site_seconds < math.inf else 1.0
    output = got.get("output", "text")
    if output not in ("text", "json"):
        raise AnalyzerError(f'"--output-format" is text or json, not {output!r}')
    threads_text = got.get("threads")
    threads: tuple[int, ...] = THREADS
    if threads_text is not None:
        try:
            threads = tuple(sorted({int(t) for t in threads_text.split(",")}))
        except ValueError:
            threads = ()
        if not threads or min(threads) < 1:
            raise AnalyzerError(
                f'"--threads" is a comma-separated list of positive integers, not {threads_text!r}'
            )
    return Options(
        available_nodes=integer("available_nodes", "--available-nodes"),
        mount_dirs=[d for d in got.get("mount_dirs", "").split(",") if d],
        output=output,
        target=number("target", "--target-samples-per-sec"),
        threads=threads,
        seconds=number("seconds", "--measure-seconds") or site_seconds,
        command=command,
    )


def main(argv: list[str] | None = None) -> int:
    """The console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out, err = sys.stdout, sys.stderr
    try:
        options = parse_args(argv)
        if options is None:
            try:
                nodes, ip = str(site_facts()[0]), system_ip()
            except Exception:  # noqa: BLE001 - help must print even with a broken cluster file
                nodes, ip = "see the cluster configuration", "<CS IP>"
            out.write(HELP.replace("{nodes}", nodes).replace("{ip}", ip))
            return 0
        # the progress goes to stderr under --output-format json, so stdout is the JSON alone
        report = analyze(options, TextProgress(out if options.output == "text" else err))
    except AnalyzerError as e:
        err.write(f"ERROR: {e}.\n" if not str(e).endswith(".") else f"ERROR: {e}\n")
        return e.code
    except KeyboardInterrupt:
        err.write("ERROR: interrupted; nothing was recommended.\n")
        return 130
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        from cs2sim.system.errors import CsError

        if isinstance(e, CsError):
            err.write(f"ERROR: {e}\n")
            return int(e.exit_code)
        err.write(f"ERROR: internal error ({type(e).__name__}: {e}); report it.\n")
        return 1
    if options.output == "json":
        out.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    else:
        out.write(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
