"""Slurm hostlist expressions: the cases Slurm's own documentation gives, the forms site
configurations use (a suffix after the range, several ranges in one name), the errors, and,
where Slurm is installed, `scontrol show hostnames` as the oracle."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cs2sim.system.sched.hostlist import MAX_HOSTS, compress, expand

CASES = {
    # slurm_hostlist_create(3): "linux[1-3,6]" represents linux1, linux2, linux3 and linux6
    "linux[1-3,6]": ["linux1", "linux2", "linux3", "linux6"],
    # Slurm::Hostlist(3pm): "node1,node[2-5,12]"; "tux[0-5,12,20-25]"
    "node1,node[2-5,12]": ["node1", "node2", "node3", "node4", "node5", "node12"],
    "tux[0-5,12,20-25]": [f"tux{i}" for i in [*range(6), 12, *range(20, 26)]],
    # slurm.conf(5), NodeName: "lx[15,18,32-33]"; zero-padded ranges keep the width
    "lx[15,18,32-33]": ["lx15", "lx18", "lx32", "lx33"],
    "linux[00-02]": ["linux00", "linux01", "linux02"],
    "n[009-011]": ["n009", "n010", "n011"],
    "n[8-11]": ["n8", "n9", "n10", "n11"],
    # several ranges in one name: a product, the first range varying slowest
    "rack[1-2]-n[01-02]": ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"],
    "n[1-3]x[1-2]": ["n1x1", "n1x2", "n2x1", "n2x2", "n3x1", "n3x2"],
    "n[1-2]-x[3],y": ["n1-x3", "n2-x3", "y"],
    # a suffix after the range
    "n[1-2]-ib": ["n1-ib", "n2-ib"],
    "n[1-2]-ib,m[3-4]": ["n1-ib", "n2-ib", "m3", "m4"],
    # plain names, separators, repeats
    "n-1": ["n-1"],
    "a[1-2],b": ["a1", "a2", "b"],
    "n[0-1],n-x": ["n0", "n1", "n-x"],
    "a b,c": ["a", "b", "c"],
    "n[1,1]": ["n1", "n1"],
    "": [],
}
BAD = ["n[3-1]", "n[1-2", "n[a-b]", "n[]", "n[1-2]]", "n[[1]]", "n[1-2-3]"]


@pytest.mark.parametrize("expr", CASES)
def test_slurm_documented_and_site_forms_expand(expr: str) -> None:
    assert expand(expr) == CASES[expr]


def test_rack_blade_form_of_slurm_conf_is_the_whole_product() -> None:
    names = expand("rack[0-63]_blade[0-41]")  # slurm.conf(5), NodeName
    assert len(names) == 64 * 42 and names[:2] == ["rack0_blade0", "rack0_blade1"]
    assert names[-1] == "rack63_blade41" and len(set(names)) == len(names)


@pytest.mark.parametrize("expr", BAD)
def test_malformed_expressions_are_refused(expr: str) -> None:
    with pytest.raises(ValueError, match="hostlist expression"):
        expand(expr)


def test_an_expression_naming_too_many_hosts_is_refused_before_it_is_built() -> None:
    with pytest.raises(ValueError, match=f"more than {MAX_HOSTS}"):
        expand("n[0-99999999]")
    with pytest.raises(ValueError, match=f"more than {MAX_HOSTS}"):
        expand("a[0-999]b[0-999]")  # each range small, the product not


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm's scontrol is not installed")
@pytest.mark.parametrize("expr", [e for e in CASES if e and "-ib" not in e and " " not in e])
def test_scontrol_show_hostnames_agrees(expr: str, tmp_path) -> None:
    """Slurm itself as the oracle (scontrol expands offline: no controller is asked, but it
    reads a slurm.conf first, so it gets a minimal one: a machine with Slurm installed and no
    cluster configured has none). Some Slurm versions refuse a suffix after a range, so those
    cases are not compared here."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=oracle\nSlurmctldHost=localhost\n")
    proc = subprocess.run(
        ["scontrol", "show", "hostnames", expr],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "SLURM_CONF": str(conf)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == CASES[expr]


@given(
    st.lists(
        st.tuples(st.sampled_from(["n", "rack1-n", "gpu"]), st.integers(0, 120), st.booleans()),
        max_size=30,
    )
)
def test_compress_then_expand_names_the_same_hosts(specs: list[tuple[str, int, bool]]) -> None:
    names = [f"{prefix}{num:03d}" if padded else f"{prefix}{num}" for prefix, num, padded in specs]
    assert set(expand(compress(names))) == set(names)
