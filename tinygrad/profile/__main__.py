"""`python -m tinygrad.profile trace.json [--top N]`: the kernels that took the most time in a trace."""
from __future__ import annotations

import argparse
import json
import sys

from tinygrad.profile.summary import format_summary, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tinygrad.profile", description=__doc__)
    ap.add_argument("trace", help="a trace written by PROFILE=1 or tinygrad.profile.Profile")
    ap.add_argument("--top", type=int, default=20, help="how many kernels to list (default 20)")
    args = ap.parse_args(argv)
    with open(args.trace) as f:
        trace = json.load(f)
    stats = summary(trace)
    if not stats:
        print("no kernels in this trace", file=sys.stderr)
        return 1
    print(format_summary(stats, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
