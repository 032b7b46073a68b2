// The GPUs of this machine and how they are connected, for doctor: each visible GPU (name, memory, compute capability,
// PCI bus id), the peer-access matrix (cudaDeviceCanAccessPeer) and the link matrix `nvidia-smi topo -m` prints
// (X self, NV<n> n bonded NVLinks, PIX / PXB / PHB / NODE / SYS: PCIe paths, nearest first).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ampcheck::doctor {

struct LinkMatrix {
  std::vector<std::string> gpus;                // "GPU0", ...
  std::vector<std::vector<std::string>> links;  // links[i][j]: "X", "NV18", "PIX", ...
};

// Parses `nvidia-smi topo -m`'s matrix (tab-separated; terminal escape codes ignored); only the GPU rows and columns
// are kept. Throws naming the line when the text has no matrix or a GPU row is short.
LinkMatrix parse_topo_matrix(const std::string& text);
// One line for doctor: "every pair NV18 (18 bonded NVLinks)", or the distinct link kinds with the pairs of each.
std::string describe_links(const LinkMatrix& m);

// doctor's "topology" (a record: each field once in its visit_fields below, io/record_json.h).
struct GpuInfo {
  int64_t index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  std::string compute_capability;  // "9.0"
  std::string pci_bus_id;          // "" where CUDA does not say
};
struct GpuLinks {  // the parsed `nvidia-smi topo -m`
  std::vector<std::string> gpus;
  std::vector<std::vector<std::string>> matrix;  // LinkMatrix::links
  std::string summary;                           // describe_links
};
struct GpuTopology {
  std::vector<GpuInfo> gpus;                   // empty on a machine without CUDA
  std::vector<std::vector<bool>> peer_access;  // [a][b]: a can access b's memory (false on the diagonal)
  std::optional<GpuLinks> links;               // null: no GPU, or the matrix could not be read (links_error)
  std::string links_error;                     // why not (written only when set)
};

template <class V>
void visit_fields(GpuInfo& g, V& v) {
  v("index", g.index);
  v("name", g.name);
  v("memory_bytes", g.memory_bytes);
  v("compute_capability", g.compute_capability);
  v("pci_bus_id", g.pci_bus_id);
}
template <class V>
void visit_fields(GpuLinks& l, V& v) {
  v("gpus", l.gpus);
  v("matrix", l.matrix);
  v("summary", l.summary);
}
template <class V>
void visit_fields(GpuTopology& t, V& v) {
  v("gpus", t.gpus);
  v("peer_access", t.peer_access);
  v("links", t.links);
  v.optional("links_error", t.links_error, !t.links_error.empty());
}

GpuTopology gpu_topology();

}  // namespace ampcheck::doctor
