// Device queries. CUDA specifics go through ATen's accelerator-agnostic API and the CUDA hooks, so this file
// compiles without the CUDA toolkit's headers and runs where no GPU exists.
#include "engine/device.h"

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>

#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#define AMPCHECK_HAVE_CUDA_HEADERS 1
#endif

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <dlfcn.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>  // environ

namespace ampcheck::engine {

namespace {
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "cpu";
}

int64_t rss_bytes(const char* field) {  // VmRSS / VmHWM from /proc/self/status, in bytes
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::string(field).size() + 1)) * 1024;
  return 0;
}
}  // namespace

at::Device resolve_device(const std::string& spec) {
  if (spec == "auto") return at::hasCUDA() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  at::Device d(spec);  // throws c10::Error on garbage
  if (d.is_cuda() && !d.has_index()) d.set_index(0);
  if (d.is_cuda() && !at::hasCUDA())
    throw std::runtime_error("unsupported here: device '" + spec + "' requested but no CUDA device is available");
  return d;
}

DeviceInfo device_info(const at::Device& device) {
  DeviceInfo info;
  if (!device.is_cuda()) {
    info.name = cpu_model_name();
    info.device_class = "cpu";
    return info;
  }
  const int idx = device.has_index() ? device.index() : 0;
#ifdef AMPCHECK_HAVE_CUDA_HEADERS
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(idx);
  info.name = prop->name;
  info.compute_capability_major = prop->major;
  info.compute_capability_minor = prop->minor;
  info.total_memory_bytes = static_cast<int64_t>(prop->totalGlobalMem);
#else
  // Built without the CUDA headers: probe the architecture through the hooks.
  const auto& hooks = at::detail::getCUDAHooks();
  info.name = "CUDA device";
  for (int major = 12; major >= 3 && info.compute_capability_major == 0; --major)
    for (int minor = 9; minor >= 0; --minor)
      if (hooks.isGPUArch({"sm_" + std::to_string(major) + std::to_string(minor)},
                          static_cast<c10::DeviceIndex>(idx))) {
        info.compute_capability_major = major;
        info.compute_capability_minor = minor;
        break;
      }
  info.total_memory_bytes =
      static_cast<int64_t>(at::accelerator::getMemoryInfo(static_cast<c10::DeviceIndex>(idx)).second);
#endif
  info.device_class =
      "cuda-sm" + std::to_string(info.compute_capability_major) + std::to_string(info.compute_capability_minor);
  return info;
}

namespace {
// The caching allocator's statistics exist only once CUDA is initialised (Python's torch.cuda.memory_stats calls
// _lazy_init() for the same reason); initialising is idempotent and allocates nothing.
void ensure_initialised(const at::Device& device) {
  if (device.is_cuda()) at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
}
}  // namespace

MemoryStats memory_stats(const at::Device& device) {
  MemoryStats m;
  ensure_initialised(device);
  if (device.is_cuda()) {
    const auto stats = at::accelerator::getDeviceStats(device.index());
    constexpr size_t kAll = 0;  // StatType::AGGREGATE
    m.allocated_bytes = stats.allocated_bytes[kAll].current;
    m.peak_allocated_bytes = stats.allocated_bytes[kAll].peak;
    m.reserved_bytes = stats.reserved_bytes[kAll].current;
    m.peak_reserved_bytes = stats.reserved_bytes[kAll].peak;
  } else {
    m.allocated_bytes = rss_bytes("VmRSS:");
    m.peak_allocated_bytes = rss_bytes("VmHWM:");
    m.reserved_bytes = m.allocated_bytes;
    m.peak_reserved_bytes = m.peak_allocated_bytes;
  }
  return m;
}

void reset_peak_memory(const at::Device& device) {
  ensure_initialised(device);
  if (device.is_cuda()) {
    at::accelerator::resetPeakStats(device.index());
  } else {
    std::ofstream clear("/proc/self/clear_refs");  // "5": reset the peak resident set size to the current one
    if (clear) clear << "5";
  }
}

void release_cached_memory(const at::Device& device) {
  ensure_initialised(device);
  if (device.is_cuda()) at::accelerator::emptyCache();
}

bool release_library_workspaces(const at::Device& device) {
  if (!device.is_cuda()) return true;
#ifdef AMPCHECK_HAVE_CUDA_HEADERS
  at::cuda::clearCublasWorkspaces();
  return true;
#else
  return false;
#endif
}

void synchronize(const at::Device& device) {
  if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
}

std::string libtorch_version() { return TORCH_VERSION; }

std::string cuda_runtime_version() {
  if (!at::hasCUDA()) return "";
  const long v = at::detail::getCUDAHooks().versionCUDART();
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string cudnn_version() {
  if (!at::hasCUDA() || !at::detail::getCUDAHooks().hasCuDNN()) return "";
  const long v = at::detail::getCUDAHooks().versionCuDNN();
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}

std::string nvidia_driver_version() {
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..." -> "580.159.04": the
  // first token after "Kernel Module" that starts with a digit and has a dot
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t at = line.find("Kernel Module");
  if (at == std::string::npos) return "";
  std::istringstream rest(line.substr(at));
  std::string token;
  while (rest >> token)
    if (std::isdigit(static_cast<unsigned char>(token[0])) && token.find('.') != std::string::npos) return token;
  return "";
}

std::string cublas_version() {
  // cuBLASLt's version from the library LibTorch loaded (looked up in the process, so a CPU build links nothing):
  // major * 10000 + minor * 100 + patch
  using Fn = size_t (*)();
  auto f = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "cublasLtGetVersion"));
  if (f == nullptr || !at::hasCUDA()) return "";
  const size_t v = f();
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

std::string nccl_version() {
  // NCCL's version from the library LibTorch loaded: major * 10000 + minor * 100 + patch (NCCL >= 2.9)
  using Fn = int (*)(int*);
  auto f = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "ncclGetVersion"));
  int v = 0;
  if (f == nullptr || !at::hasCUDA() || f(&v) != 0 || v <= 0) return "";
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

std::string cuda_driver_version() {
#ifdef AMPCHECK_HAVE_CUDA_HEADERS
  int v = 0;
  if (!at::hasCUDA() || cudaDriverGetVersion(&v) != cudaSuccess || v == 0) return "";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
#else
  return "";
#endif
}

std::vector<std::pair<std::string, std::string>> numerics_environment() {
  // the settings known to change CPU or GPU numerics: MKL's conditional-numerical-reproducibility branch and ISA cap,
  // oneDNN's ISA cap and default floating-point math mode, the OpenMP / MKL thread counts (a reduction split over
  // other thread counts rounds differently), ATen's kernel capability, cuBLAS's workspace (which GEMM algorithms fit),
  // the TF32 override of the NVIDIA driver / libraries, NCCL's algorithm, protocol and channel choices (the order of a
  // reduction across ranks)
  static const char* const kNamed[] = {"MKL_CBWR",
                                       "MKL_ENABLE_INSTRUCTIONS",
                                       "MKL_NUM_THREADS",
                                       "MKL_DYNAMIC",
                                       "OMP_NUM_THREADS",
                                       "ONEDNN_MAX_CPU_ISA",
                                       "DNNL_MAX_CPU_ISA",
                                       "ONEDNN_DEFAULT_FPMATH_MODE",
                                       "DNNL_DEFAULT_FPMATH_MODE",
                                       "ATEN_CPU_CAPABILITY",
                                       "CUBLAS_WORKSPACE_CONFIG",
                                       "NVIDIA_TF32_OVERRIDE",
                                       "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
                                       "NCCL_ALGO",
                                       "NCCL_PROTO",
                                       "NCCL_MIN_NCHANNELS",
                                       "NCCL_MAX_NCHANNELS",
                                       "NCCL_MIN_CTAS",
                                       "NCCL_MAX_CTAS",
                                       "NCCL_NTHREADS",
                                       "NCCL_TREE_THRESHOLD",
                                       "NCCL_NVLS_ENABLE",
                                       "NCCL_COLLNET_ENABLE"};
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* name : kNamed) {
    const char* v = std::getenv(name);
    out.emplace_back(std::string("env_") + name, v ? v : kUnset);
  }
  // every other cuBLAS / cuBLASLt setting that is set (their names are algorithm and workspace knobs), logging aside
  std::vector<std::pair<std::string, std::string>> more;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    const std::string name = kv.substr(0, eq);
    if ((name.rfind("CUBLAS_", 0) == 0 || name.rfind("CUBLASLT_", 0) == 0) && name.find("LOG") == std::string::npos &&
        name != "CUBLAS_WORKSPACE_CONFIG")
      more.emplace_back("env_" + name, eq == std::string::npos ? "" : kv.substr(eq + 1));
  }
  std::sort(more.begin(), more.end());
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

std::vector<std::pair<std::string, std::string>> stack_fingerprint(const at::Device& device) {
  const DeviceInfo info = device_info(device);
  std::string isa;  // the x86 extensions LibTorch's CPU kernels dispatch on (FP32 bits differ with them)
  {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("flags", 0) == 0) {
        std::istringstream flags(line.substr(line.find(':') + 1));
        std::string f;
        while (flags >> f)
          if (f == "avx2" || f == "fma" || f == "avx512f" || f == "avx512_bf16" || f == "avx512_fp16" ||
              f == "amx_tile" || f == "amx_bf16" || f == "amx_fp16")
            isa += (isa.empty() ? "" : " ") + f;
        break;
      }
  }
  auto& ctx = at::globalContext();
  auto flag = [](bool b) { return std::string(b ? "on" : "off"); };
  auto reduction = [](at::CuBLASReductionOption o) {  // cuBLAS's fp16 / bf16 GEMM reductions
    switch (o) {
      case at::CuBLASReductionOption::AllowReducedPrecisionWithSplitK:
        return std::string("reduced precision, split-K");
      case at::CuBLASReductionOption::DisallowReducedPrecisionAllowSplitK:
        return std::string("fp32, split-K");
      case at::CuBLASReductionOption::DisallowReducedPrecisionDisallowSplitK:
        return std::string("fp32, no split-K");
    }
    return std::string("?");
  };
  const bool cuda = device.is_cuda();
  std::vector<std::pair<std::string, std::string>> fp = {
      {"torch", libtorch_version()},
      {"cuda_runtime", cuda_runtime_version()},
      {"cuda_driver", cuda ? cuda_driver_version() : ""},
      {"nvidia_driver", cuda ? nvidia_driver_version() : ""},
      {"cudnn", cudnn_version()},
      {"cublas", cuda ? cublas_version() : ""},
      {"nccl", cuda ? nccl_version() : ""},
      {"device_name", info.name},
      {"device_class", info.device_class},
      {"compute_capability",
       cuda ? std::to_string(info.compute_capability_major) + "." + std::to_string(info.compute_capability_minor) : ""},
      {"device_memory_bytes", cuda ? std::to_string(info.total_memory_bytes) : ""},
      {"cpu_model", cpu_model_name()},
      {"cpu_isa", isa},
      {"aten_cpu_capability", at::get_cpu_capability()},
      {"threads", std::to_string(at::get_num_threads())},
      {"deterministic_algorithms", flag(ctx.deterministicAlgorithms())},
      {"tf32_cublas", flag(ctx.allowTF32CuBLAS())},
      {"tf32_cudnn", flag(ctx.allowTF32CuDNN())},
      {"fp16_reduction_cublas", reduction(ctx.allowFP16ReductionCuBLAS())},
      {"bf16_reduction_cublas", reduction(ctx.allowBF16ReductionCuBLAS())},
      {"float32_matmul_precision", ctx.float32MatmulPrecision() == at::Float32MatmulPrecision::HIGHEST ? "highest"
                                   : ctx.float32MatmulPrecision() == at::Float32MatmulPrecision::HIGH  ? "high"
                                                                                                       : "medium"}};
  for (auto& kv : numerics_environment()) fp.push_back(std::move(kv));
  return fp;
}

int64_t cuda_device_count() { return at::hasCUDA() ? static_cast<int64_t>(at::accelerator::deviceCount()) : 0; }

bool cuda_peer_access(int64_t from, int64_t to) {
#ifdef AMPCHECK_HAVE_CUDA_HEADERS
  int can = 0;
  if (from == to || from >= cuda_device_count() || to >= cuda_device_count()) return false;
  if (cudaDeviceCanAccessPeer(&can, static_cast<int>(from), static_cast<int>(to)) != cudaSuccess) return false;
  return can != 0;
#else
  return false;
#endif
}

std::string cuda_pci_bus_id(int64_t device) {
#ifdef AMPCHECK_HAVE_CUDA_HEADERS
  char id[32] = {0};
  if (device >= cuda_device_count() || cudaDeviceGetPCIBusId(id, sizeof(id), static_cast<int>(device)) != cudaSuccess)
    return "";
  return id;
#else
  return "";
#endif
}

std::string cuda_device_uuid(int64_t device) {
#ifdef AMPCHECK_HAVE_CUDA_HEADERS
  cudaDeviceProp prop{};
  if (device >= cuda_device_count() || cudaGetDeviceProperties(&prop, static_cast<int>(device)) != cudaSuccess)
    return "";
  // as nvidia-smi prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  static const char* hex = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    const auto b = static_cast<unsigned char>(prop.uuid.bytes[i]);
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
#else
  (void)device;
  return "";
#endif
}

}  // namespace ampcheck::engine
