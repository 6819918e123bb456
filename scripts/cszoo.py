"""cszoo: the Model Zoo's single command (Release 2.4+): `cszoo fit params.yaml`, `cszoo
validate`, `cszoo validate_all`, `cszoo model list|info`, `cszoo data_processor list|info`,
`cszoo config pull|validate|convert_legacy|diff|stats`, `cszoo data_preprocess list|pull|run`,
`cszoo checkpoint info|convert`. The command line is runtime/zoo/parser.py and the work is in
runtime/zoo/; this file is the executable: the one error boundary, and what is printed.

Exit codes: 0 done, 2 a usage error (argparse), 1 a refused or failed command (one line on
stderr: what failed and what to do), 130 interrupted; fit / validate / validate_all return
run.py's own code.
"""

from __future__ import annotations

import sys

from cs2sim.runtime.zoo.parser import build_parser
from cs2sim.system.errors import CsError

__all__ = ["main", "entry"]


def main(argv: list[str] | None = None) -> int:
    """Parse, run the subcommand's handler, print what it returns."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        out = args.func(args)
    except CsError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("error: interrupted.", file=sys.stderr)
        return 130
    except OSError as e:  # the file system said no: a path, a permission, a full disk
        where = f" ({e.filename})" if e.filename else ""
        print(
            f"error: {e.strerror or e}{where}; check the path and its permissions.",
            file=sys.stderr,
        )
        return 1
    except Exception as e:  # noqa: BLE001 - the one boundary: no traceback reaches a user
        print(f"error: internal error ({type(e).__name__}: {e}); report it.", file=sys.stderr)
        return 1
    if isinstance(out, int):
        return out
    if out:
        print(out)
    return 0


def entry() -> None:
    """The installed command."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
