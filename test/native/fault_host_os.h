// A HostOS for tests: delegates to another HostOS table (the real one, from _cpu.real_host_os()) but fails the next
// N allocations or library loads on request. Installed into the CPU runtime as a C table (_cpu.set_host_os), the
// seam runtimes/cpu/host_os.h offers; the runtime itself contains no fault injection.
//
// It wraps instead of faking everything so memory allocated before or after the fault is still real and can be
// freed by whichever HostOS is current then.
#pragma once

#include "host_os.h"

namespace tg::test {

// The fault injector's table, delegating to `inner` (which must stay valid for the life of the process). Every call
// returns the same table; the fault counters start at zero.
const tg_host_os* fault_host_os(const tg_host_os* inner);

void fail_next_allocs(int n);  // the next n host allocations return nullptr (-> MemoryError)
void fail_next_loads(int n);   // the next n library loads fail as if dlopen had (-> RuntimeError)

}  // namespace tg::test
