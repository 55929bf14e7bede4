"""Reading a trace back: the kernels that took the most device time.

`summary(trace)` groups the "kernel" spans of a Chrome trace (as Profiler writes it) by kernel name and device, and
`format_summary` prints them as a table: total time, share of all kernel time, launches, and the achieved GFLOP/s and
GB/s (from the FLOP and byte estimates in each span's args).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class KernelStat:
    """One kernel's launches in a trace (same name on the same device)."""
    name: str
    device: str
    count: int = 0
    us: float = 0.0
    flops: int = 0
    bytes: int = 0

    @property
    def gflops(self) -> float:
        return self.flops / self.us * 1e-3 if self.us else 0.0

    @property
    def gbs(self) -> float:
        return self.bytes / self.us * 1e-3 if self.us else 0.0


def summary(trace: dict[str, Any]) -> list[KernelStat]:
    """The kernels of `trace` (a parsed Chrome trace), the most total time first."""
    devices = {ev["pid"]: ev["args"]["name"] for ev in trace["traceEvents"]
               if ev.get("ph") == "M" and ev.get("name") == "process_name"}
    stats: dict[tuple[str, int], KernelStat] = {}
    for ev in trace["traceEvents"]:
        if ev.get("ph") != "X" or ev.get("cat") != "kernel":
            continue
        key = (ev["name"], ev["pid"])
        st = stats.get(key)
        if st is None:
            st = stats[key] = KernelStat(ev["name"], devices.get(ev["pid"], str(ev["pid"])))
        st.count += 1
        st.us += ev["dur"]
        st.flops += ev.get("args", {}).get("flops", 0)
        st.bytes += ev.get("args", {}).get("bytes", 0)
    return sorted(stats.values(), key=lambda s: -s.us)


def format_summary(stats: list[KernelStat], top: int = 20) -> str:
    """`stats` as a table of the `top` kernels by total time, with a total line."""
    total = sum(s.us for s in stats) or 1.0
    lines = [f"{'kernel':40s} {'device':8s} {'total ms':>10s} {'share':>7s} {'count':>6s} {'avg us':>9s} "
             f"{'GFLOP/s':>9s} {'GB/s':>8s}"]
    for s in stats[:top]:
        lines.append(f"{s.name[:40]:40s} {s.device[:8]:8s} {s.us / 1e3:10.3f} {s.us / total:7.1%} {s.count:6d} "
                     f"{s.us / s.count:9.1f} {s.gflops:9.2f} {s.gbs:8.2f}")
    if len(stats) > top:
        rest = stats[top:]
        lines.append(f"{f'... {len(rest)} more':40s} {'':8s} {sum(s.us for s in rest) / 1e3:10.3f} "
                     f"{sum(s.us for s in rest) / total:7.1%} {sum(s.count for s in rest):6d}")
    lines.append(f"{'total':40s} {'':8s} {total / 1e3:10.3f} {1:7.1%} {sum(s.count for s in stats):6d}")
    return "\n".join(lines)
