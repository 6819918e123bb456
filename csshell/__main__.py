"""`python -m cs2sim.csshell`: the same as the `cs` console script."""

from __future__ import annotations

import sys

from cs2sim.csshell.main import main

if __name__ == "__main__":
    sys.exit(main())
