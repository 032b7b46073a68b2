// ATEN_CPU_CAPABILITY against the processor's flags (cpu_capability.h).
#include "engine/cpu_capability.h"

#include <cstdlib>

namespace ampcheck::engine {

std::set<std::string> required_cpu_flags(const std::string& capability) {
  if (capability == "avx512") return {"avx512f", "avx512vl", "avx512bw", "avx512dq", "fma"};
  if (capability == "avx2") return {"avx2", "fma"};
  return {};
}

std::string unsupported_cpu_capability(const std::string& requested, const std::set<std::string>& cpu_flags) {
  // ATen compares the value exactly (lower case); anything else it ignores, so it cannot select a missing ISA
  if (requested != "avx512" && requested != "avx2") return "";
  std::string missing;
  for (const auto& f : required_cpu_flags(requested))
    if (cpu_flags.count(f) == 0) missing += (missing.empty() ? "" : ", ") + f;
  if (missing.empty()) return "";
  const std::string instead =
      requested == "avx512" && cpu_flags.count("avx2") && cpu_flags.count("fma") ? "avx2" : "default";
  return "ATEN_CPU_CAPABILITY=" + requested + " asks for CPU kernels this processor cannot run (it lacks " + missing +
         "): ATen would die with an illegal instruction (SIGILL) at the first such kernel. HINT: unset "
         "ATEN_CPU_CAPABILITY, or set it to " +
         instead + " (what this processor supports)";
}

std::set<std::string> host_cpu_flags() {
  std::set<std::string> flags;
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) flags.insert("avx2");
  if (__builtin_cpu_supports("fma")) flags.insert("fma");
  if (__builtin_cpu_supports("avx512f")) flags.insert("avx512f");
  if (__builtin_cpu_supports("avx512vl")) flags.insert("avx512vl");
  if (__builtin_cpu_supports("avx512bw")) flags.insert("avx512bw");
  if (__builtin_cpu_supports("avx512dq")) flags.insert("avx512dq");
#endif
  return flags;
}

std::string check_requested_cpu_capability() {
#if defined(__x86_64__) || defined(__i386__)
  const char* env = std::getenv("ATEN_CPU_CAPABILITY");
  return env ? unsupported_cpu_capability(env, host_cpu_flags()) : "";
#else
  return "";  // avx2 / avx512 are x86 names: ATen elsewhere ignores them
#endif
}

}  // namespace ampcheck::engine
