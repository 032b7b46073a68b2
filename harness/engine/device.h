// What the harness needs to know about a device: its name and class (where references are valid: "cpu",
// "cuda-sm90"), capability, memory statistics of the caching allocator (CUDA) or the process (CPU), and a sync.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::engine {

struct DeviceInfo {
  std::string name;          // "NVIDIA H200", or the CPU model
  std::string device_class;  // "cpu", "cuda-sm90"
  int compute_capability_major = 0, compute_capability_minor = 0;
  int64_t total_memory_bytes = 0;
};

DeviceInfo device_info(const at::Device& device);

// Resolves "auto" (cuda if available, else cpu), "cpu", "cuda", "cuda:N".
at::Device resolve_device(const std::string& spec);

struct MemoryStats {
  int64_t allocated_bytes = 0;       // CUDA: current allocated by the caching allocator; CPU: process RSS
  int64_t peak_allocated_bytes = 0;  // since the last reset_peak_memory(); CPU: peak RSS of the process
  int64_t reserved_bytes = 0;        // CUDA: reserved by the caching allocator; CPU: process RSS
  int64_t peak_reserved_bytes = 0;   // since the last reset_peak_memory(); CPU: peak RSS
};

MemoryStats memory_stats(const at::Device& device);
void reset_peak_memory(const at::Device& device);
// CPU: resets the kernel's peak-RSS mark (VmHWM) through /proc/self/clear_refs, where the kernel allows it.
void release_cached_memory(const at::Device& device);  // CUDA: empty the caching allocator's cache
// CUDA: frees the cuBLAS / cuBLASLt workspaces ATen keeps per handle and stream (at::cuda::clearCublasWorkspaces),
// the process-wide allocations the first matmul leaves in the caching allocator. Returns false where this build
// cannot (compiled without the CUDA headers); a no-op returning true on the CPU.
bool release_library_workspaces(const at::Device& device);
void synchronize(const at::Device& device);  // SYNC POINT: waits for the device to finish queued work

std::string libtorch_version();
std::string cuda_runtime_version();  // "" without CUDA
std::string cudnn_version();         // "" without cuDNN
std::string cublas_version();        // cuBLASLt's major.minor.patch ("13.1.0"); "" without CUDA
std::string nccl_version();          // "2.27.7"; "" without CUDA / NCCL
// The NVIDIA kernel driver's version ("580.159.04", from /proc/driver/nvidia/version) and the CUDA version the
// driver supports ("13.0", cudaDriverGetVersion; needs the CUDA headers at build time); "" where unknown.
std::string nvidia_driver_version();
std::string cuda_driver_version();

// The visible CUDA devices (0 without CUDA) and, for a pair, whether device `from` can map device `to`'s memory
// (cudaDeviceCanAccessPeer: NVLink or PCIe peer access; false where unknown — built without the CUDA headers) and
// a device's PCI bus id ("0000:19:00.0"; "" where unknown).
int64_t cuda_device_count();

// The stack a run computes on, as ordered (key, value) pairs: torch, CUDA runtime and driver, cuDNN, the device (name,
// class, compute capability, memory), the CPU (model, the ISA extensions that change FP32 bits, ATen's CPU kernel
// capability, intra-op threads) and the process's numerics defaults as they stand when asked, outside a run's
// NumericsGuard (deterministic algorithms, TF32 in cuBLAS / cuDNN, cuBLAS's fp16 / bf16 GEMM reductions: what an
// environment or a library default turns on; a run's own TF32 / determinism are its strategy's). Empty values where
// unknown (no CUDA).
// Every trajectory and reference carries it (attributes "stack_<key>"); `ampcheck doctor` prints it.
// The numerics-changing environment settings are part of it, as "env_<NAME>" keys (kUnset where unset): see
// numerics_environment().
std::vector<std::pair<std::string, std::string>> stack_fingerprint(const at::Device& device);
// The environment variables known to change CPU / GPU numerics — MKL_CBWR, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA,
// ONEDNN_DEFAULT_FPMATH_MODE, OMP / MKL thread counts, ATEN_CPU_CAPABILITY, CUBLAS_WORKSPACE_CONFIG,
// NVIDIA_TF32_OVERRIDE, NCCL's algorithm / protocol / channel settings (each listed, kUnset where unset) and every
// other CUBLAS_* / CUBLASLT_* variable that is set (logging aside) — as ("env_<NAME>", value) pairs.
constexpr const char* kUnset = "(unset)";
// The cuBLAS workspace ampcheck's deterministic runs set when CUBLAS_WORKSPACE_CONFIG is unset (engine/precision.cpp,
// before cuBLAS's first use): what an unset variable means for a deterministic ampcheck run.
constexpr const char* kDeterministicCublasWorkspace = ":4096:8";
std::vector<std::pair<std::string, std::string>> numerics_environment();
bool cuda_peer_access(int64_t from, int64_t to);
std::string cuda_pci_bus_id(int64_t device);
// A device's UUID as nvidia-smi prints it ("GPU-8f6c..."; "" where unknown).
std::string cuda_device_uuid(int64_t device);

}  // namespace ampcheck::engine
