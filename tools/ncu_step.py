#!/usr/bin/env python3
"""tools/ncu_step.py: one decode step's kernels from an `ncu --metrics gpu__time_duration.sum --csv` log.

Reads the CSV that tools/device/ncu_step.sh writes (one row per profiled kernel, in launch order), takes the
kernels of the last complete step (after the second-to-last sampling kernel, k_fast_pick or k_sample, up to and
including the last one), groups them by kernel name (template arguments kept: k_gemv<1, 2, 0> and k_gemv<1, 4, 0>
are different shapes' choices) and prints, per group, the launches, the total and mean microseconds and the share
of the step; then the step's sum. ncu serialises the kernels (no PDL overlap, one at a time), so the sum is longer
than the step in a CUDA graph: the table says where the time goes, not how long the step is.

    python3 tools/ncu_step.py ncu.csv [--steps N] [--skip-last M] [--list]
    (--steps: the last N steps, averaged per step; default 1. --skip-last: leave the final M steps out first: a
    batch whose prompts were prefilled in C chunks decodes all its sequences together only up to the last C - 1
    steps, where the first chunks' sequences have finished)
"""
import argparse
import csv
import gzip
import re
import sys

SAMPLERS = ("k_fast_pick", "k_sample")
UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def short_name(full):
    """k_gemv<1, 2, 0>(gv_args) -> k_gemv<1, 2, 0>; 'void ' and the parameter list dropped."""
    name = re.sub(r"^void ", "", full)
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i]
    return name


def read_kernels(path):
    """[(name, microseconds)] in launch order."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = [line for line in f if line.startswith('"')]
    if not lines:
        sys.exit("%s: no CSV rows (was ncu run with --csv?)" % path)
    rows = csv.reader(lines)
    head = next(rows)
    try:
        ki, ui, vi = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
    except ValueError:
        sys.exit("%s: not an ncu --csv log (columns %s)" % (path, head))
    out = []
    for r in rows:
        unit = r[ui]
        if unit not in UNITS:
            sys.exit("%s: unknown time unit %r" % (path, unit))
        out.append((short_name(r[ki]), float(r[vi].replace(",", "")) * UNITS[unit]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--skip-last", type=int, default=0)
    ap.add_argument("--list", action="store_true", help="first a line per step: its kernels and summed us")
    a = ap.parse_args()
    ks = read_kernels(a.csv)
    ends = [i for i, (n, _) in enumerate(ks) if n.split("<")[0] in SAMPLERS]
    if a.list:
        for s, e in enumerate(ends):
            lo = ends[s - 1] + 1 if s else 0
            print("step %3d: %5d kernels, %10.1f us" % (s, e + 1 - lo, sum(us for _, us in ks[lo:e + 1])))
    if a.skip_last > 0:
        ends = ends[:-a.skip_last]
    if len(ends) < a.steps + 1:
        sys.exit("%s: %d sampling kernels (after skipping %d), need %d for %d step(s)" %
                 (a.csv, len(ends), a.skip_last, a.steps + 1, a.steps))
    step = ks[ends[-a.steps - 1] + 1:ends[-1] + 1]
    groups = {}
    for n, us in step:
        g = groups.setdefault(n, [0, 0.0])
        g[0] += 1
        g[1] += us
    total = sum(us for _, us in step)
    print("%d kernels a step (%d step(s) averaged), ncu-serialised sum %.1f us" % (len(step) // a.steps, a.steps,
                                                                                   total / a.steps))
    print("%-44s %9s %11s %9s %7s" % ("kernel", "launches", "total us", "mean us", "share"))
    for n, (c, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print("%-44s %9d %11.1f %9.2f %6.1f%%" % (n[:44], c // a.steps, us / a.steps, us / c, 100 * us / total))


if __name__ == "__main__":
    main()
