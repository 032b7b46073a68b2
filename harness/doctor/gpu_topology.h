// The GPUs of this machine and how they are connected, for doctor: each visible GPU (name, memory, compute capability,
// PCI bus id), the peer-access matrix (cudaDeviceCanAccessPeer) and the link matrix `nvidia-smi topo -m` prints
// (X self, NV<n> n bonded NVLinks, PIX / PXB / PHB / NODE / SYS: PCIe paths, nearest first).
#pragma once

#include <nlohmann/json.hpp>

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

// {"gpus": [...], "peer_access": [[...]], "links": {"gpus": [...], "matrix": [[...]], "summary": "..."} | null,
//  "links_error": "..."}; empty "gpus" on a machine without CUDA.
nlohmann::json gpu_topology();

}  // namespace ampcheck::doctor
