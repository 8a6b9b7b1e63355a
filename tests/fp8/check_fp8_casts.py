#!/usr/bin/python3
"""llmrun's FP8 casts against casts computed here, independently, from the format definitions.

    check_fp8_casts.py FP8_CAST_DUMP

Builds the value of each of the 256 byte patterns of E4M3 and E5M2 from the OCP FP8
definition (sign, exponent field, mantissa field, bias; E4M3 has no infinity and S.1111.111
is NaN; E5M2 is IEEE-like), casts a few hundred thousand fp32 values by searching that table
(nearest value, ties to the even code, saturation to +-max, NaN to NaN), and compares every
byte and float the llmrun dumper wrote: decode, re-encode, scalar encode, the buffer cast
with scales, its dequantisation, the vectorised round trip, and their amax / overflow /
underflow counts. Exits non-zero with the first mismatches.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

FORMATS = {"e4m3": (4, 3, 7), "e5m2": (5, 2, 15)}  # exponent bits, mantissa bits, bias
SCALES = ["1", "0.37", "31000.5", "0.0009765625"]


def value_of(code, fmt):
    e_bits, m_bits, bias = FORMATS[fmt]
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> m_bits) & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    if fmt == "e4m3" and e == 15 and m == 7:
        return float("nan")
    if fmt == "e5m2" and e == 31:
        return sign * float("inf") if m == 0 else float("nan")
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1.0 + m / 2.0 ** m_bits) * 2.0 ** (e - bias)


TABLES = {f: np.array([value_of(c, f) for c in range(256)]) for f in FORMATS}
# Positive finite values in code order 0x00, 0x01, ...: the code of a value is its index.
POSITIVE = {f: TABLES[f][:128][np.isfinite(TABLES[f][:128])] for f in FORMATS}
assert POSITIVE["e4m3"][-1] == 448.0 and len(POSITIVE["e4m3"]) == 127
assert POSITIVE["e5m2"][-1] == 57344.0 and len(POSITIVE["e5m2"]) == 124
for f in FORMATS:
    assert np.all(np.diff(POSITIVE[f]) > 0), f


def reference_cast(v32, fmt):
    """Bytes of float32 values v32 cast to fmt: nearest, ties to even, saturating."""
    vals = POSITIVE[fmt]
    v = v32.astype(np.float64)
    nan = np.isnan(v)
    a = np.where(nan, 0.0, np.minimum(np.abs(v), vals[-1]))
    hi = np.clip(np.searchsorted(vals, a, side="left"), 0, len(vals) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - vals[lo], vals[hi] - a
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(hi % 2 == 0, hi, lo)))
    code = code | np.where(np.signbit(v), 0x80, 0)
    nan_code = 0x7F if fmt == "e4m3" else 0x7E
    return np.where(nan, nan_code | np.where(np.signbit(v), 0x80, 0), code).astype(np.uint8), nan


def is_nan_code(b, fmt):
    m = b & 0x7F
    return m == 0x7F if fmt == "e4m3" else m > 0x7C


def inputs():
    f32 = np.float32
    parts = [np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-40, -1e-45, 1.1754944e-38,
                       3.4028235e38, -3.4028235e38, 1e30, 1.0, -1.0], dtype=f32)]
    for f in FORMATS:
        t = TABLES[f]
        parts.append(t[np.isfinite(t)].astype(f32))
        pos = POSITIVE[f]
        mids = ((pos[:-1] + pos[1:]) / 2).astype(f32)  # exact ties (at most 5 significant bits)
        for m in (mids, -mids):
            parts += [m, np.nextafter(m, f32(np.inf)), np.nextafter(m, f32(-np.inf))]
        top, ulp = pos[-1], pos[-1] - pos[-2]
        edge = np.array([top + ulp / 2, top + ulp, 2 * top, top * 1.01], dtype=f32)
        small = pos[1]  # the smallest subnormal
        tiny = np.array([small / 2, small / 4, small * 0.75, small * 1.5, small * 2.5, small / 1024], dtype=f32)
        for e in (edge, tiny):
            parts += [e, -e, np.nextafter(e, f32(np.inf)), np.nextafter(e, f32(-np.inf))]
    rng = np.random.default_rng(20261122)
    n = 300_000
    mant = rng.uniform(1.0, 2.0, n)
    expo = rng.integers(-40, 24, n)
    sign = np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)
    parts.append((sign * mant * 2.0 ** expo).astype(f32))
    parts.append(rng.integers(0, 2 ** 32, 100_000, dtype=np.uint64).astype(np.uint32).view(f32))
    return np.concatenate(parts).astype(f32)


def same_floats(got, want):
    """Bitwise equal, except that any NaN matches any NaN."""
    both_nan = np.isnan(got) & np.isnan(want)
    return both_nan | (got.view(np.uint32) == want.astype(np.float32).view(np.uint32))


class Checker:
    def __init__(self):
        self.failures = []

    def expect(self, ok, what, x=None, got=None, want=None):
        if np.all(ok):
            return
        bad = np.flatnonzero(~np.asarray(ok))
        detail = ""
        if x is not None:
            i = bad[:5]
            detail = "; first at inputs %s: got %s, want %s" % (list(x[i]), list(got[i]), list(want[i]))
        self.failures.append("%s: %d mismatches%s" % (what, len(bad), detail))


def check(out, x, chk):
    for f in FORMATS:
        load = lambda name, dt: np.fromfile(os.path.join(out, name), dtype=dt)
        table32 = TABLES[f].astype(np.float32)
        codes = np.arange(256)

        # 1. Every byte pattern decodes to its value from the definition.
        dec = load("decode_%s.f32" % f, np.float32)
        chk.expect(same_floats(dec, table32), f + " decode", codes, dec, table32)
        # 2. ... and re-encodes to itself; NaNs to a NaN; E5M2's infinities to +-max (saturating).
        re = load("reencode_%s.u8" % f, np.uint8)
        want = codes.astype(np.uint8).copy()
        if f == "e5m2":
            want[0x7C], want[0xFC] = 0x7B, 0xFB
        nan_codes = np.array([is_nan_code(c, f) for c in range(256)])
        ok = np.where(nan_codes, is_nan_code(re, f), re == want)
        chk.expect(ok, f + " re-encode", codes, re, want)

        # 3. Scalar encode of every input.
        want, nan = reference_cast(x, f)
        got = load("encode_%s.u8" % f, np.uint8)
        chk.expect(np.where(nan, is_nan_code(got, f), got == want), f + " encode", x, got, want)

        stats = json.load(open(os.path.join(out, "stats.json")))[f]
        for k, s in enumerate(SCALES):
            scale = np.float32(s)
            v = (x * scale).astype(np.float32)  # IEEE fp32 multiply, as the C++ does
            want, nan = reference_cast(v, f)
            tag = "%s scale %s" % (f, s)
            # 4. Buffer cast.
            got = load("quant_%s_%d.u8" % (f, k), np.uint8)
            chk.expect(np.where(nan, is_nan_code(got, f), got == want), tag + " quantize", x, got, want)
            # 5. Dequantised: decode(q) * (1 / scale) in fp32.
            inv = np.float32(1) / scale
            want_deq = (table32[want] * inv).astype(np.float32)
            got_deq = load("dequant_%s_%d.f32" % (f, k), np.float32)
            chk.expect(same_floats(got_deq, want_deq), tag + " dequantize", x, got_deq, want_deq)
            # 6. The vectorised round trip holds the FP8 value itself.
            got_rt = load("round_%s_%d.f32" % (f, k), np.float32)
            chk.expect(same_floats(got_rt, table32[want]), tag + " round trip", x, got_rt, table32[want])
            # 7. What the casts saw.
            finite_max = POSITIVE[f][-1]
            any_nan = np.isnan(x).any()
            want_stats = {
                "amax": "nan" if any_nan else float(np.max(np.abs(x))),
                "overflows": int(np.count_nonzero(np.abs(v.astype(np.float64)) > finite_max)),
                "underflows": int(np.count_nonzero((x != 0) & ~np.isnan(x) & ((want & 0x7F) == 0))),
            }
            assert stats[k]["scale"] == s
            for path in ("quantize", "round_trip"):
                if stats[k][path] != want_stats:
                    chk.failures.append("%s %s stats: got %s, want %s" % (tag, path, stats[k][path], want_stats))


def main():
    np.seterr(all="ignore")  # NaN, infinity and overflow inputs are the point
    dumper = sys.argv[1]
    x = inputs()
    with tempfile.TemporaryDirectory() as out:
        x.tofile(os.path.join(out, "in.f32"))
        subprocess.run([dumper, os.path.join(out, "in.f32"), out] + SCALES, check=True)
        chk = Checker()
        check(out, x, chk)
        if chk.failures:
            print("FAIL:\n  " + "\n  ".join(chk.failures))
            return 1
        # The comparison itself must notice one wrong byte.
        path = os.path.join(out, "quant_e4m3_1.u8")
        q = np.fromfile(path, dtype=np.uint8)
        i = int(np.flatnonzero((q & 0x7F) < 0x7E)[1000])
        q[i] ^= 1
        q.tofile(path)
        probe = Checker()
        check(out, x, probe)
        if not any("e4m3 scale 0.37 quantize: 1 mismatches" in f for f in probe.failures):
            print("FAIL: a flipped byte went unnoticed: %s" % probe.failures)
            return 1
    print("fp8 casts: %d inputs x %d scales, E4M3 and E5M2, all 256 codes: identical to the definition" %
          (len(x), len(SCALES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
