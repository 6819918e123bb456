"""round_to against independent references, and the rounding properties, with hypothesis.

Three oracles, none sharing code with runtime/numerics/precision.py:
* float16: numpy's own float32 -> float16 cast (IEEE, round to nearest even);
* `ref_round`: float64/Fraction arithmetic -- math.frexp finds the binade, the grid spacing follows
  from the format's bits, and Python's round() of a Fraction rounds half to even;
* `Table`: every finite value of the 16-bit format, decoded from its 2^16 codes, so "nearest" and
  "ties to even" are checked by search, not by formula.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cs2sim.runtime.numerics.precision import FORMATS, HALF_FORMATS, Policy, round_to

F32_MAX = float(np.finfo(np.float32).max)


# -- oracles --------------------------------------------------------------------------------------


def ref_round(x: float, name: str) -> float:
    """Round the float32 value `x` to format `name`, in exact arithmetic (ties to even)."""
    f = FORMATS[name]
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    _, e = math.frexp(abs(x))  # |x| = m * 2^e, 0.5 <= m < 1: binade e - 1
    q = max(e - 1, f.emin) - f.man_bits  # grid spacing 2^q (fixed below the smallest normal)
    n = round(Fraction(abs(x)) / Fraction(2) ** q)  # Fraction rounds half to even
    r = math.ldexp(n, q)
    if r > f.max:
        r = math.inf
    return math.copysign(r, x)


class Table:
    """Every non-negative finite value of a 16-bit format, by code (code parity = mantissa lsb)."""

    def __init__(self, name: str) -> None:
        f = FORMATS[name]
        n_finite = (2**f.exp_bits - 1) << f.man_bits  # codes with sign 0, below inf/NaN
        codes = np.arange(n_finite)
        e, m = codes >> f.man_bits, codes & ((1 << f.man_bits) - 1)
        # m * 2^(emin - man_bits) if e == 0, else (2^man_bits + m) * 2^(e - bias - man_bits):
        # exact in float64
        sig = np.where(e == 0, m, m + 2**f.man_bits).astype(np.float64)
        scale = np.where(e == 0, f.emin, e - f.bias) - f.man_bits
        values = np.ldexp(sig, scale)
        # beyond max, IEEE rounds as if the next binade existed: its first value (even) means inf
        self.floats = np.append(values, 2.0 ** (f.emax + 1))
        assert np.all(np.diff(self.floats) > 0)

    def nearest(self, x: float) -> float:
        """The nearest value to float32 `x`; ties to the even code; inf past the threshold."""
        a = Fraction(abs(x))
        i = int(np.searchsorted(self.floats, float(a)))
        cands = [j for j in (i - 1, i, i + 1) if 0 <= j < len(self.floats)]
        best = min(cands, key=lambda j: (abs(Fraction(float(self.floats[j])) - a), j % 2))
        r = math.inf if best == len(self.floats) - 1 else float(self.floats[best])
        return math.copysign(r, x)


TABLES = {name: Table(name) for name in HALF_FORMATS}


def bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical, except that any NaN equals any NaN."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return bool(np.all((bits(a) == bits(b)) | (np.isnan(a) & np.isnan(b))))


# -- strategies -----------------------------------------------------------------------------------

any_f32 = st.integers(0, 2**32 - 1).map(lambda b: float(np.uint32(b).view(np.float32)))


def near_grid(name: str) -> st.SearchStrategy[float]:
    """float32 values around the format's range, with the dropped bits often exactly a tie."""
    f = FORMATS[name]
    drop = 23 - f.man_bits
    half = 1 << (drop - 1)
    low = st.one_of(
        st.sampled_from([0, half, half - 1, half + 1, (1 << drop) - 1, 1]),
        st.integers(0, (1 << drop) - 1),
    )
    lo_exp = max(1, f.emin - f.man_bits - 3 + 127)
    hi_exp = min(254, f.emax + 2 + 127)
    exp = st.one_of(
        st.integers(lo_exp, hi_exp), st.sampled_from([0, 1, f.emin + 127, f.emax + 127])
    )

    def build(sign: int, e: int, kept: int, dropped: int) -> float:
        b = (sign << 31) | (e << 23) | (kept << drop) | dropped
        return float(np.uint32(b).view(np.float32))

    return st.builds(build, st.integers(0, 1), exp, st.integers(0, (1 << f.man_bits) - 1), low)


def values(name: str) -> st.SearchStrategy[float]:
    return st.one_of(near_grid(name), any_f32, st.floats(width=32))


formats = st.sampled_from(HALF_FORMATS)


# -- exactness ------------------------------------------------------------------------------------


@given(st.lists(st.one_of(values("float16"), any_f32), min_size=1, max_size=64))
def test_float16_matches_numpy_cast(xs):
    x = np.array(xs, np.float32)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).astype(np.float32)
    assert same(round_to(x, "float16"), expected)


def test_float16_matches_numpy_cast_on_a_million_random_bit_patterns():
    x = np.random.default_rng(0).integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32)
    x = x.view(np.float32)
    with np.errstate(over="ignore"):
        assert same(round_to(x, "float16"), x.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("name", ["bfloat16", "cbfloat16", "float16"])
@given(data=st.data())
@pytest.mark.slow
def test_matches_exact_reference(name, data):
    xs = data.draw(st.lists(values(name), min_size=1, max_size=32))
    got = round_to(np.array(xs, np.float32), name)
    assert same(got, [ref_round(float(np.float32(v)), name) for v in xs])


@pytest.mark.parametrize("name", ["bfloat16", "cbfloat16", "float16"])
@given(data=st.data())
@pytest.mark.slow
def test_common_range_arrays_match_reference(name, data):
    # all values normal (or zero) in the format: cbfloat16's fast path handles these arrays
    f = FORMATS[name]
    normal = st.floats(f.tiny, f.max, width=32) | st.just(0.0)
    signed = st.tuples(normal, st.sampled_from([1.0, -1.0])).map(lambda t: t[0] * t[1])
    xs = data.draw(st.lists(signed, max_size=40))
    got = round_to(np.array(xs, np.float32).reshape(-1), name)
    assert same(got, [ref_round(v, name) for v in xs])


# -- properties -----------------------------------------------------------------------------------


@settings(max_examples=200)
@given(formats, st.data())
def test_round_to_nearest_even_and_representable(name, data):
    x = data.draw(values(name))
    r = float(round_to(np.array([x], np.float32), name)[0])
    if math.isnan(x) or math.isinf(x):
        assert r == x or (math.isnan(r) and math.isnan(x))
        return
    assert r == TABLES[name].nearest(x) and math.copysign(1, r) == math.copysign(1, x)


@given(
    formats, st.lists(st.one_of(values("cbfloat16"), values("float16")), min_size=2, max_size=40)
)
def test_monotonic(name, xs):
    x = np.sort(np.array([v for v in xs if not math.isnan(v)], np.float32))
    r = round_to(x, name)
    assert np.all(r[:-1] <= r[1:])


@given(formats, st.lists(any_f32, min_size=1, max_size=40))
def test_idempotent(name, xs):
    r = round_to(np.array(xs, np.float32), name)
    assert same(round_to(r, name), r)


@given(formats, st.lists(any_f32, min_size=1, max_size=40))
def test_sign_symmetry(name, xs):
    x = np.array(xs, np.float32)
    neg = (bits(x) ^ np.uint32(0x80000000)).view(np.float32)  # flips the sign of zeros and NaNs too
    r, rn = round_to(x, name), round_to(neg, name)
    assert same(rn, (bits(r) ^ np.uint32(0x80000000)).view(np.float32))


@given(formats, st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=20))
def test_nan_stays_nan(name, payloads):
    b = np.array(payloads, np.uint64).astype(np.uint32) | np.uint32(0x7F800001)  # NaN, any payload
    assert np.isnan(round_to(b.view(np.float32), name)).all()


@pytest.mark.parametrize("name", HALF_FORMATS)
def test_overflow_to_inf_beyond_max_and_max_kept(name):
    f = FORMATS[name]
    thr = f.max + 2.0 ** (f.emax - f.man_bits - 1)  # half an ulp above max: the tie goes to inf
    below = float(np.nextafter(np.float32(thr), np.float32(0)))
    x = np.array(
        [f.max, below, thr, 2 * f.max if 2 * f.max < F32_MAX else F32_MAX, np.inf], np.float32
    )
    expected = np.array([f.max, f.max, np.inf, np.inf, np.inf], np.float32)
    assert same(round_to(x, name), expected)
    assert same(round_to(-x, name), -expected)


@pytest.mark.parametrize("name", HALF_FORMATS)
def test_underflow_to_signed_zero_below_half_the_min_subnormal(name):
    f = FORMATS[name]
    h = f.min_subnormal / 2
    if h < 2.0**-149:  # bfloat16's min subnormal is float32's: nothing representable below half
        pytest.skip("no float32 value below half of bfloat16's min subnormal")
    just_above = float(np.nextafter(np.float32(h), np.float32(1)))
    just_below = float(np.nextafter(np.float32(h), np.float32(0)))
    x = np.array([just_below, h, just_above, f.min_subnormal, 2.0**-149], np.float32)
    r = round_to(x, name)
    assert same(r, [0.0, 0.0, f.min_subnormal, f.min_subnormal, 0.0])  # the tie h goes to even 0
    rn = round_to(-x, name)
    assert same(rn, [-0.0, -0.0, -f.min_subnormal, -f.min_subnormal, -0.0])  # signed zeros


def test_bfloat16_subnormals_are_float32_subnormals_with_7_bits():
    # bfloat16 has float32's exponent range; its subnormal grid is 2^-133, float32's is 2^-149
    x = np.array([2.0**-133, 3 * 2.0**-133, 2.0**-149, 2.0**-134 + 2.0**-149], np.float32)
    assert same(round_to(x, "bfloat16"), [2.0**-133, 3 * 2.0**-133, 0.0, 2.0**-133])


@settings(max_examples=50)
@given(formats, st.lists(st.one_of(values("float16"), any_f32), min_size=6, max_size=6))
def test_in_place_equals_out_of_place(name, xs):
    a = np.array(xs, np.float32).reshape(2, 3)
    expected = round_to(a, name)
    y = a.copy()
    assert round_to(y, name, out=y) is y and same(y, expected)  # out is x
    z = a.copy()
    round_to(z.T, name, out=z.T)  # another view object of the same memory, transposed
    assert same(z, expected)
    out = np.empty((3, 2), np.float32)
    assert same(round_to(a.T, name, out=out), expected.T)  # transposed input, separate out
    assert same(a, np.array(xs, np.float32).reshape(2, 3))  # the input is untouched


@pytest.mark.parametrize("name", HALF_FORMATS)
def test_large_arrays_both_paths_match_reference_on_a_sample(name):
    rng = np.random.default_rng(1)
    base = rng.standard_normal(20_000).astype(np.float32)
    for x in (base, np.maximum(base, 0), base * 1e-6, base * 1e-11, np.append(base, np.inf)):
        got = round_to(x, name)
        idx = rng.choice(x.size, 300, replace=False)
        assert same(got[idx], [ref_round(float(v), name) for v in x[idx]])


# -- the formats' ranges and the API --------------------------------------------------------------


def test_cbfloat16_range_constants():
    f = FORMATS["cbfloat16"]
    assert (f.exp_bits, f.man_bits, f.bias) == (6, 9, 31)  # bias 31: our documented design
    assert f.max == (2 - 2.0**-9) * 2.0**31 and 4.28e9 < f.max < 4.30e9
    assert f.tiny == 2.0**-30 and f.min_subnormal == 2.0**-39
    x = np.array([f.max, f.tiny, f.min_subnormal, 2.0**32, 2.0**-40, 1.5 * 2.0**-39], np.float32)
    assert same(round_to(x, "cbfloat16"), [f.max, f.tiny, f.min_subnormal, np.inf, 0.0, 2.0**-38])


def test_float16_and_bfloat16_range_constants():
    h, b = FORMATS["float16"], FORMATS["bfloat16"]
    assert (h.max, h.tiny, h.min_subnormal) == (65504.0, 2.0**-14, 2.0**-24)
    assert b.max == float(np.float32((2 - 2.0**-7) * 2.0**127)) and b.tiny == 2.0**-126
    assert same(round_to(np.array([65519.99, 65520.0], np.float32), "float16"), [65504.0, np.inf])


def test_policy_float32_is_free_and_half_rounds():
    x = np.array([1.0 + 2.0**-12, 3.0], np.float32)
    assert Policy("float32").cast(x) is x and not Policy().enabled
    out = np.empty_like(x)
    assert Policy("float32").cast(x, out=out) is out and same(out, x)
    assert same(Policy("bfloat16").cast(x), [1.0, 3.0]) and Policy("cbfloat16").enabled


def test_bad_format_and_bad_out_raise():
    with pytest.raises(ValueError, match="unknown number format"):
        round_to(np.zeros(2, np.float32), "fp8")
    with pytest.raises(ValueError):
        Policy("half")
    with pytest.raises(ValueError, match="out must be float32"):
        round_to(np.zeros(2, np.float32), "float16", out=np.zeros(2, np.float64))


def test_empty_and_zero_d_arrays():
    assert round_to(np.zeros((0, 3), np.float32), "float16").shape == (0, 3)
    assert float(round_to(np.float32(1 + 2.0**-12), "cbfloat16")) == 1.0
