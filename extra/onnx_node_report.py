"""Run every ONNX backend node test through OnnxRunner and print passed / total per op and per opset.

    PYTHONPATH=. python extra/onnx_node_report.py [--failures] [substring ...]

Excluded cases (unsupported ops or dtypes, see extra/onnx_node_tests.py) are counted apart with their reasons; the
first percentage is over the cases that run, the second over every case but those excluded for their dtypes.
Substrings keep only the cases whose names contain one of them.
"""
from __future__ import annotations

import os
import sys
import time
from collections import Counter, defaultdict

# run as a script, this folder comes first on sys.path, where extra/onnx.py (0.9's entry point) would hide the onnx
# package: the repository root takes its place
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
sys.path.insert(0, os.path.dirname(_here))


def main(argv: list[str]) -> int:
    from extra.onnx_node_tests import excluded_dtype, exclusion, node_cases, run_case
    show = "--failures" in argv
    subs = [a for a in argv if not a.startswith("--")]
    by_op: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_opset: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    excluded: Counter = Counter()
    dtype_excluded = 0
    failures = []
    t0 = time.perf_counter()
    for op, opset, case in node_cases():
        if subs and not any(s in case.name for s in subs):
            continue
        why = exclusion(op, case)
        if why:
            excluded[why] += 1
            dtype_excluded += excluded_dtype(case) is not None
            continue
        err = run_case(case)
        for row in (by_op[op], by_opset[opset]):
            row[0] += err is None
            row[1] += 1
        if err:
            failures.append((case.name, err))
    passed, total = sum(r[0] for r in by_op.values()), sum(r[1] for r in by_op.values())
    print(f"{'op':<28} passed / total")
    for op in sorted(by_op):
        p, t = by_op[op]
        print(f"{op:<28} {p:>4} / {t:<4}{'' if p == t else '  <'}")
    print(f"\n{'opset':<28} passed / total")
    for opset in sorted(by_opset):
        p, t = by_opset[opset]
        print(f"{opset:<28} {p:>4} / {t}")
    print(f"\nexcluded ({sum(excluded.values())} cases):")
    for why, k in excluded.most_common():
        print(f"  {k:>4}  {why}")
    print(f"\nran {total} cases: {passed} passed ({100 * passed / max(total, 1):.1f}%) "
          f"in {time.perf_counter() - t0:.0f} s")
    # issue 31's measure: passed over every case except those excluded for their dtypes or value kinds alone
    pool = total + sum(excluded.values()) - dtype_excluded
    print(f"over all cases but the {dtype_excluded} excluded for dtypes (strings, float8, int4, sequences...): "
          f"{passed} / {pool} ({100 * passed / max(pool, 1):.1f}%)")
    if show:
        print("\nfailures:")
        for name, err in failures:
            print(f"  {name}: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
