"""A submission's spec, checked before the job is booked: its form by the server, and every path
it names by a child running AS THE CALLER (asuser.call_as), so the server learns only what the
caller may learn and a job is refused at once when it names what its user cannot reach.

The paths: the working directory (entered), run.py (opened for reading), the compile directory
(entered when it exists, else its parent, where the compile job will create it), every
`--mount_dirs` and `--python_paths` directory (entered). The compile hash must be a compile's
directory name (`cs_<hex>`): the server joins it to the compile directory to tell the execute
job what to load, and a log export zips that directory, so `.` or `../x` are refused here.
The job itself then runs as its user (runs.py), so nothing it opens later has more rights.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from cs2sim.system.appliance.asuser import Account, call_as
from cs2sim.system.appliance.export import HASH_RE
from cs2sim.system.appliance.replicas import COMPILE_FROM_ENV
from cs2sim.system.errors import PermissionDenied, UsageError

__all__ = ["check_spec", "compile_env", "CHECK_S"]

CHECK_S = 30.0  # the caller's child has this long to look at the paths


def _bad(what: str) -> UsageError:
    return UsageError(f"bad request: {what}.")


def _abs(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise _bad(f"{what} must be an absolute path")
    return value


def check_form(spec: dict[str, Any]) -> None:
    """UsageError unless the spec has the form a client sends (no path is touched here)."""
    for key in ("cwd", "run_py", "wrapper"):
        if not isinstance(spec.get(key), str):
            raise _bad(f"spec.{key} is missing")
    _abs(spec["cwd"], "spec.cwd")
    _abs(spec["run_py"], "spec.run_py")
    if Path(spec["run_py"]).name != "run.py" or spec["wrapper"] not in ("python", "python-ws"):
        raise _bad("a wsjob runs a Model Zoo run.py under python or python-ws")
    if not all(isinstance(a, str) for a in spec.get("args", [])):
        raise _bad("spec.args must be strings")
    if spec.get("compile_dir") not in (None, ""):
        _abs(spec["compile_dir"], "spec.compile_dir")
    hash_ = spec.get("compile_hash")
    if hash_ not in (None, "") and not (isinstance(hash_, str) and HASH_RE.fullmatch(hash_)):
        raise _bad("spec.compile_hash must be a compile's name, cs_ and hexadecimal digits")
    for key in ("mount_dirs", "python_paths"):
        value = spec.get(key) or []
        if not isinstance(value, list):
            raise _bad(f"spec.{key} must be a list")
        for d in value:
            _abs(d, f"spec.{key} entry")


def _enter(path: str, what: str, name: str) -> None:
    """Runs as the caller: PermissionDenied unless `path` is a directory they may enter."""
    try:
        st = os.stat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{what} {path} is not a directory; pass a directory")
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        os.fchdir(fd)
        os.close(fd)
    except OSError as e:
        raise PermissionDenied(
            f"Permission denied: {what} {path} cannot be entered by you ({name}: "
            f"{e.strerror}); a job runs with your rights only, so pass a directory you may read"
        ) from None


def _probe(spec: dict[str, Any], name: str) -> bytes:
    """Runs as the caller (the child of call_as): every path the spec names, looked at."""
    _enter(spec["cwd"], "the working directory", name)
    try:
        fd = os.open(spec["run_py"], os.O_RDONLY)
        os.close(fd)
    except OSError as e:
        raise PermissionDenied(
            f"Permission denied: {spec['run_py']} cannot be read by you ({name}: {e.strerror}); "
            "run a run.py you may read"
        ) from None
    compile_dir = spec.get("compile_dir")
    if compile_dir:
        where = compile_dir if os.path.lexists(compile_dir) else os.path.dirname(compile_dir)
        _enter(where, "the compile directory", name)
    for key, flag in (("mount_dirs", "--mount_dirs"), ("python_paths", "--python_paths")):
        for d in spec.get(key) or []:
            _enter(d, flag, name)
    os.chdir("/")
    return b""


def check_spec(spec: dict[str, Any], account: Account) -> None:
    """check_form, then the paths as `account` (PermissionDenied / UsageError, one sentence)."""
    check_form(spec)
    call_as(account, lambda: _probe(spec, account.name), limit=64 * 1024, timeout=CHECK_S)


def compile_env(spec: dict[str, Any]) -> dict[str, str]:
    """The compile the execute job loads instead of compiling again: the one the client found
    or had compiled, `<compile_dir>/<compile hash>` (runtime/job/cs_run.py reads it, as the
    job's user)."""
    compile_dir, hash_ = spec.get("compile_dir"), spec.get("compile_hash")
    if not (isinstance(compile_dir, str) and compile_dir and isinstance(hash_, str)):
        return {}
    if not HASH_RE.fullmatch(hash_):
        return {}
    return {COMPILE_FROM_ENV: str(Path(compile_dir) / hash_)}
