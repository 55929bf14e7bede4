"""Runs the benchmark's rows (tinygrad_rows.py, and torch_rows.py beside them, and numpy_rows.py on host devices) on
devices, and lays the results out as the terminal table."""
from __future__ import annotations

import sys
from typing import Any

from tinygrad.benchmark import numpy_rows, tinygrad_rows, torch_rows, workloads
from tinygrad.device import Device


def available(requested: list[str] | None) -> list[str]:
    """The devices to run: those asked for, else every compiled device module here; those that fail to open are
    reported on stderr and skipped."""
    names = requested or [d for d in Device.KNOWN if d not in ("CPU", "DISK")]
    out = []
    for d in names:
        try:
            Device[d]
            out.append(d)
        except Exception as e:  # a device whose driver or hardware is missing here
            print(f"skipping {d}: {e}", file=sys.stderr)
    return out


def run(devices: list[str], with_torch: bool = True, progress: bool = False,
        only: list[str] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """Every row (or those named in `only`) on every device in `devices`: the results --json prints."""
    torch_ok = with_torch and _has_torch()
    rows = [r for r in tinygrad_rows.ROWS if only is None or r[0] in only]
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for device in devices:
        gpu = Device[device].linearizer_opts.has_local
        sizes = workloads.GPU_SIZES if gpu else workloads.HOST_SIZES
        results[device] = {}
        for i, (name, unit, measure) in enumerate(rows):
            if progress:
                print(f"\r\x1b[K[{device} {i + 1}/{len(rows)}] {name} ...", end="", file=sys.stderr, flush=True)
            entry: dict[str, Any] = {"unit": unit, "tinygrad": None, "torch": None, "numpy": None}
            try:
                entry["tinygrad"] = round(measure(device, sizes), 3)
            except NotImplementedError as e:
                entry["error"] = str(e)
            except Exception as e:  # a failing row is reported, and the others still run
                entry["error"] = f"{type(e).__name__}: {e}"
            theirs = torch_rows.ROWS.get(name) if torch_ok else None
            if theirs is not None:
                try:
                    entry["torch"] = round(theirs(device, sizes), 3)
                except NotImplementedError:
                    pass
                except Exception as e:
                    entry["torch_error"] = f"{type(e).__name__}: {e}"
            mine = numpy_rows.ROWS.get(name) if not gpu else None
            if mine is not None:
                try:
                    entry["numpy"] = round(mine(device, sizes), 3)
                except Exception as e:
                    entry["numpy_error"] = f"{type(e).__name__}: {e}"
            results[device][name] = entry
    if progress:
        print("\r\x1b[K", end="", file=sys.stderr, flush=True)
    return results


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The results as the terminal table: a block per device, a line per row."""
    def cell(v) -> str:
        return f"{v:12.2f}" if isinstance(v, (int, float)) else f"{'-':>12s}"
    lines = []
    for device, rows in results.items():
        # numpy's column only where it ran (host devices)
        np_col = any(e.get("numpy") is not None for e in rows.values())
        lines.append(f"{device}")
        head = f"  {'':28s} {'unit':>8s} {'tinygrad':>12s} {'PyTorch':>12s}"
        lines.append(head + (f" {'numpy':>12s}" if np_col else ""))
        for name, e in rows.items():
            note = f"  ({e['error']})" if "error" in e else ""
            extra = f" {cell(e.get('numpy'))}" if np_col else ""
            lines.append(f"  {name:28s} {e['unit']:>8s} {cell(e['tinygrad'])} {cell(e['torch'])}{extra}{note}")
    return "\n".join(lines)
