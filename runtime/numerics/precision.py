"""16-bit floating-point formats, emulated by rounding float32 values.

A CS-2 computes with 16-bit inputs and fp32 accumulation (Cerebras' Data Formats page,
docs/sources.md). We keep every array in float32 and round the values a CS-2 would hold in 16 bits
to the nearest representable value of the chosen format (round to nearest, ties to even), so the
arithmetic stays in fast float32 BLAS while the numbers are exactly those of the 16-bit format.
numpy's own float16 arithmetic is hundreds of times slower, and a float32 -> float16 -> float32 cast
round trip costs several times more than the bit-level rounding below.

The formats (sign / exponent / mantissa bits, exponent bias):

    float16    1 / 5 / 10, bias 15    IEEE binary16: max 65504, min normal 2^-14,
                                      min subnormal 2^-24
    bfloat16   1 / 8 / 7,  bias 127   max ~3.39e38, same exponent range as float32
    cbfloat16  1 / 6 / 9,  bias 31    Cerebras CB16. The bias is not published ("customized
                                      bias"); we choose 31, the IEEE-style 2^(6-1)-1, which
                                      puts the largest finite value at (2 - 2^-9) * 2^31 ~ 4.29e9
                                      and is consistent with cstorch's default loss scale of 2^31
                                      for cbfloat16. Min normal 2^-30, min subnormal 2^-39. Like
                                      IEEE, the top exponent encodes inf and NaN (also
                                      unpublished; our design).

All three have subnormals, signed zeros, +-inf and NaN; a value beyond the largest finite one
rounds to inf exactly as IEEE round-to-nearest does (float16: 65519.99 -> 65504, 65520 -> inf).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["Cast", "Format", "FORMATS", "HALF_FORMATS", "round_to", "Policy"]


@dataclass(frozen=True)
class Format:
    """A binary floating-point format narrower than float32."""

    name: str
    exp_bits: int
    man_bits: int
    bias: int

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number (the top exponent is inf/NaN)."""
        return int(2**self.exp_bits - 2) - self.bias

    @property
    def max(self) -> float:
        """Largest finite value."""
        return float((2.0 - 2.0**-self.man_bits) * 2.0**self.emax)

    @property
    def tiny(self) -> float:
        """Smallest positive normal value."""
        return float(2.0**self.emin)

    @property
    def min_subnormal(self) -> float:
        """Smallest positive subnormal value."""
        return float(2.0 ** (self.emin - self.man_bits))


FORMATS: dict[str, Format | None] = {
    "float32": None,  # no rounding: the master precision
    "float16": Format("float16", exp_bits=5, man_bits=10, bias=15),
    "bfloat16": Format("bfloat16", exp_bits=8, man_bits=7, bias=127),
    "cbfloat16": Format("cbfloat16", exp_bits=6, man_bits=9, bias=31),
}
HALF_FORMATS = tuple(name for name, f in FORMATS.items() if f is not None)

_FP32_EMIN = -126
_SIGN = np.uint32(0x80000000)
_ABS = np.uint32(0x7FFFFFFF)
_EXP = np.uint32(0x7F800000)


def _format(name: str) -> Format | None:
    try:
        return FORMATS[name]
    except KeyError:
        allowed = ", ".join(FORMATS)
        raise ValueError(f"unknown number format {name!r}; expected one of {allowed}") from None


def round_to(x: np.ndarray, fmt: str, out: np.ndarray | None = None) -> np.ndarray:
    """Round float32 `x` to the nearest value of `fmt` (ties to even); result is float32.

    `out` may be `x` itself (in place) or a preallocated float32 array of the same shape; any
    memory layout works (transposed views included).
    """
    f = _format(fmt)
    x = np.asarray(x, dtype=np.float32)
    if out is None:
        out = np.empty_like(x)
    elif out.dtype != np.float32 or out.shape != x.shape:
        raise ValueError(f"out must be float32 of shape {x.shape}, not {out.dtype} {out.shape}")
    if f is None:
        if out is not x:
            np.copyto(out, x)
        return out
    if x.size == 0:
        return out
    # Writing over the input (out is x, or another view of the same memory) needs scratch space
    # where the separate case can use `out` itself.
    inplace = out is x or np.may_share_memory(x, out)
    xs, outs = (x, out) if x.ndim else (x.reshape(1), out.reshape(1))  # ufuncs make 0-d scalars
    if f.emin == _FP32_EMIN:
        _round_wide(xs, f, outs, inplace)  # bfloat16: float32's own exponent range
    else:
        _round_narrow(xs, f, outs, inplace)  # float16, cbfloat16: narrower exponent range
    return out


def _round_mantissa(xb: np.ndarray, ob: np.ndarray, tmp: np.ndarray | None, f: Format) -> None:
    """Round the mantissa of float32 bits `xb` to `f.man_bits` bits, into `ob`.

    `tmp` is uint32 scratch of the same shape, needed only when `ob` is `xb`'s memory (else None).

    Integer domain: add half an ulp minus one, plus the lsb of the kept part (the tie-to-even
    nudge), then clear the dropped bits. A carry out of the mantissa correctly bumps the
    exponent (and turns the largest values into inf). Exact for every finite input whose result
    is a normal number of `f`, and for zeros.
    """
    shift = 23 - f.man_bits
    t = ob if tmp is None else tmp  # scratch: `ob` itself unless writing over the input
    np.right_shift(xb, shift, out=t)
    np.bitwise_and(t, np.uint32(1), out=t)
    np.add(t, np.uint32((1 << (shift - 1)) - 1), out=t)
    np.add(xb, t, out=ob)
    np.bitwise_and(ob, np.uint32(~((1 << shift) - 1) & 0xFFFFFFFF), out=ob)


def _round_wide(x: np.ndarray, f: Format, out: np.ndarray, inplace: bool) -> None:
    """bfloat16: the integer rounding is exact everywhere (float32 subnormals included), and
    overflow to inf is the carry's doing; only a NaN whose payload carries needs restoring."""
    xb, ob = x.view(np.uint32), out.view(np.uint32)
    nan_mask = np.isnan(x) if np.isnan(x.max()) else None  # max() propagates NaN: one read
    tmp = np.empty(x.shape, np.uint32) if inplace else None
    _round_mantissa(xb, ob, tmp, f)
    if nan_mask is not None:
        out[nan_mask] = np.float32(np.nan)


# Below this smallest normal, values are rare enough (cbfloat16: 9.3e-10) that checking for them
# first pays; float16's 6.1e-5 sits inside the range of ordinary gradients and activations.
_RARELY_BELOW = 2.0**-20


def _round_common(xb: np.ndarray, ob: np.ndarray, f: Format, inplace: bool) -> bool:
    """The common case of `_round_narrow`: when no magnitude is nonzero and below the smallest
    normal, nor at or beyond the overflow threshold (inf and NaN included), the integer mantissa
    rounding alone is exact (zeros round to themselves). Returns False, writing nothing, if not."""
    tiny2 = int(np.array(f.tiny, np.float32).view(np.uint32)) << 1
    over = np.array(f.max + 2.0 ** (f.emax - f.man_bits - 1), np.float32)  # half an ulp above max
    over2 = int(over.view(np.uint32)) << 1
    mag = np.left_shift(xb, 1)  # (same shape) |x| as bits: the shift drops the sign
    if int(mag.max()) >= over2:
        return False
    np.subtract(mag, np.uint32(1), out=mag)  # zeros wrap to the top, out of the minimum
    if int(mag.min()) < tiny2 - 1:
        return False
    _round_mantissa(xb, ob, mag if inplace else None, f)
    return True


def _round_narrow(x: np.ndarray, f: Format, out: np.ndarray, inplace: bool) -> None:
    """float16 / cbfloat16: the exponent range is narrower than float32's, so the result can be
    subnormal or overflow where the float32 input is normal. One uniform float pass handles all:

    1) c = 2^(e + 23 - man_bits), e = the binade of |x| clamped to [emin, emax + 1]: its float32
       ulp is 2^(e - man_bits), the spacing of `f` in that binade. Below the smallest normal the
       clamp fixes the spacing at min_subnormal: that is the subnormal range.
    2) (|x| + c) - c: the FPU rounds the sum to that spacing, ties to even (c is a multiple of
       twice the spacing, so the sum's lsb is the result's lsb); the subtraction is exact.
       Zeros, inf and NaN pass through unchanged.
    3) Anything above the largest finite value becomes inf; the sign goes back (-tiny -> -0).
    """
    xb, ob = x.view(np.uint32), out.view(np.uint32)
    if f.tiny < _RARELY_BELOW and _round_common(xb, ob, f, inplace):
        return
    sign = np.bitwise_and(xb, _SIGN) if inplace else None  # x is overwritten before step 3
    # 1) the constant, as bits: exponent field of x, clamped, plus 23 - man_bits
    c = np.bitwise_and(xb, _EXP)  # (same shape) uint32 scratch
    np.clip(c, np.uint32((f.emin + 127) << 23), np.uint32((f.emax + 1 + 127) << 23), out=c)
    may_overflow = int(c.max()) >= (f.emax + 127) << 23  # anything in the top binade or above
    np.add(c, np.uint32((23 - f.man_bits) << 23), out=c)
    cf = c.view(np.float32)
    # 2) round |x| by the FPU
    np.bitwise_and(xb, _ABS, out=ob)
    with np.errstate(all="ignore"):  # NaN operands (quiet or signalling) stay NaN
        np.add(out, cf, out=out)
        np.subtract(out, cf, out=out)
    # 3) overflow, then the sign
    if may_overflow:
        out[out > f.max] = np.float32(np.inf)  # NaN compares False and stays NaN
    if sign is None:
        sign = np.bitwise_and(xb, _SIGN, out=c)
    np.bitwise_or(ob, sign, out=ob)


class Cast(Protocol):
    """A rounding like `Policy.cast`: x rounded, into `out` when given."""

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray: ...


@dataclass(frozen=True)
class Policy:
    """Which number format the values a CS-2 holds in 16 bits take: activations, weights as used
    by the kernels, and gradients. Master weights and optimizer state stay float32.

    `half="float32"` is plain fp32 training (no rounding at all).
    """

    half: str = "float32"

    def __post_init__(self) -> None:
        _format(self.half)

    @property
    def enabled(self) -> bool:
        """True when values are rounded to a 16-bit format."""
        return self.half != "float32"

    def cast(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Round `x` to the policy's 16-bit format; `x` itself when disabled and no `out`."""
        if not self.enabled:
            if out is None or out is x:
                return x
            np.copyto(out, x)
            return out
        return round_to(x, self.half, out=out)
