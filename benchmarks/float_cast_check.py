"""Check ampconfig's fast float32 -> float16 conversion against numpy on every float32 bit pattern.

``ampconfig.rewrite.float_cast.float32_to_float16`` converts large weights with ONNX Runtime's Cast kernel instead of
``ndarray.astype`` (10-20x faster). This script feeds it all 2**32 float32 bit patterns, in chunks, and counts the
elements whose float16 bits differ from numpy's. NaNs are only required to stay NaN (with their sign): numpy keeps
the top bits of a NaN's payload, ONNX Runtime writes the quiet NaN; weights never depend on a NaN's payload.
Run by hand (a few minutes):

    python benchmarks/float_cast_check.py [--chunk-bits 24]

Exit 0 when every pattern matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ampconfig.rewrite.float_cast import float32_to_float16


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunk-bits", type=int, default=24, help="log2 of the patterns converted per call")
    args = parser.parse_args(argv)
    chunk = 1 << args.chunk_bits
    mismatches = nan_payloads = 0
    started = time.perf_counter()
    fast_s = numpy_s = 0.0
    for start in range(0, 1 << 32, chunk):
        bits = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32)
        values = bits.view(np.float32)
        t0 = time.perf_counter()
        fast = float32_to_float16(values)
        t1 = time.perf_counter()
        with np.errstate(over="ignore"):
            want = values.astype(np.float16)
        numpy_s += time.perf_counter() - t1
        fast_s += t1 - t0
        fast_bits, want_bits = fast.view(np.uint16), want.view(np.uint16)
        both_nan = np.isnan(fast) & np.isnan(want) & ((fast_bits >> 15) == (want_bits >> 15))
        nan_payloads += int(np.count_nonzero(both_nan & (fast_bits != want_bits)))
        wrong = (fast_bits != want_bits) & ~both_nan
        differ = int(np.count_nonzero(wrong))
        if differ:
            first = np.flatnonzero(wrong)[0]
            print(
                f"chunk at {start:#010x}: {differ} differ; first {bits[first]:#010x}: "
                f"{fast.view(np.uint16)[first]:#06x} vs numpy {want.view(np.uint16)[first]:#06x}"
            )
        mismatches += differ
    print(
        f"{1 << 32:,} float32 bit patterns, {mismatches:,} mismatches, {nan_payloads:,} NaNs with another payload; "
        f"ORT cast {fast_s:.1f} s, numpy astype {numpy_s:.1f} s ({numpy_s / fast_s:.1f}x), "
        f"total {time.perf_counter() - started:.0f} s"
    )
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
