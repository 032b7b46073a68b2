// Whether this processor can run the ATen CPU kernels an environment asks for. ATen trusts ATEN_CPU_CAPABILITY
// blindly: `avx512` on a CPU without AVX-512 dispatches AVX-512 kernels and the process dies with SIGILL at the first
// one, with no message. ampcheck checks the request against the processor's flags before any kernel runs (main entry:
// every command, doctor and validate included) and refuses with a message instead.
#pragma once

#include <set>
#include <string>

namespace ampcheck::engine {

// The x86 feature flags ATen's capabilities need, as /proc/cpuinfo spells them: avx512 needs avx512f, avx512vl,
// avx512bw, avx512dq and fma (ATen's own AVX512 test); avx2 needs avx2 and fma. `default` needs nothing.
std::set<std::string> required_cpu_flags(const std::string& capability);
// "" when `requested` (ATEN_CPU_CAPABILITY's value; "" = unset) can run on a CPU with `cpu_flags`, else the reason:
// which flags are missing, and what to set instead. A value ATen does not know is left to ATen (it ignores it with a
// warning and picks what the CPU supports).
std::string unsupported_cpu_capability(const std::string& requested, const std::set<std::string>& cpu_flags);
// This processor's flags among those above (the compiler's cpuid probe; empty off x86).
std::set<std::string> host_cpu_flags();
// unsupported_cpu_capability for $ATEN_CPU_CAPABILITY on this processor.
std::string check_requested_cpu_capability();

}  // namespace ampcheck::engine
