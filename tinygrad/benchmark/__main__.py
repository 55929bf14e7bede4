"""`python -m tinygrad.benchmark`: see the package docstring."""
from __future__ import annotations

import argparse
import json
import sys

from tinygrad.benchmark.runner import available, run, table


def main(argv: list[str] | None = None) -> int:
    import tinygrad.benchmark as pkg
    parser = argparse.ArgumentParser(prog="python -m tinygrad.benchmark", description=pkg.__doc__.splitlines()[0])
    parser.add_argument("--device", action="append", help="a device to run (repeatable); default: every one here")
    parser.add_argument("--row", action="append", help="only this row (repeatable), by its name in the table")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch rows")
    args = parser.parse_args(argv)
    devices = available(args.device)
    if not devices:
        print("no device to benchmark", file=sys.stderr)
        return 1
    results = run(devices, with_torch=not args.no_torch, progress=sys.stderr.isatty() and not args.json,
                  only=args.row)
    print(json.dumps(results) if args.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
