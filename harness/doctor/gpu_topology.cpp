// GPU list, peer access and link matrix (gpu_topology.h).
#include "doctor/gpu_topology.h"

#include "engine/device.h"

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace ampcheck::doctor {

namespace {
std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, '\t')) {
    const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
    out.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
  }
  return out;
}

bool is_gpu_label(const std::string& s) { return std::regex_match(s, std::regex("GPU[0-9]+")); }

std::string meaning(const std::string& kind) {
  if (kind.rfind("NV", 0) == 0 && kind.size() > 2) return kind.substr(2) + " bonded NVLinks";
  static const std::map<std::string, std::string> m = {{"PIX", "PCIe through at most one bridge"},
                                                       {"PXB", "PCIe through several bridges"},
                                                       {"PHB", "PCIe through a host bridge"},
                                                       {"NODE", "PCIe and host bridges within a NUMA node"},
                                                       {"SYS", "PCIe and the link between NUMA nodes"}};
  const auto it = m.find(kind);
  return it == m.end() ? "see nvidia-smi topo's legend" : it->second;
}
}  // namespace

LinkMatrix parse_topo_matrix(const std::string& raw) {
  const std::string text = std::regex_replace(raw, std::regex("\x1b\\[[0-9;]*m"), "");
  std::istringstream in(text);
  std::string line;
  std::vector<size_t> cols;  // header positions of the GPU columns
  LinkMatrix m;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto cells = split_tabs(line);
    if (cols.empty()) {
      for (size_t i = 0; i < cells.size(); ++i)
        if (is_gpu_label(cells[i])) cols.push_back(i), m.gpus.push_back(cells[i]);
      continue;
    }
    if (cells.empty() || !is_gpu_label(cells[0])) {
      if (m.links.size() == m.gpus.size()) break;  // past the GPU rows (NIC rows, the legend)
      continue;
    }
    std::vector<std::string> row;
    for (size_t c : cols) {
      if (c >= cells.size())
        throw std::runtime_error("nvidia-smi topo -m, line " + std::to_string(line_no) + " (" + cells[0] +
                                 "): " + std::to_string(cells.size()) + " cells, expected a link for each of " +
                                 std::to_string(cols.size()) + " GPUs");
      row.push_back(cells[c]);
    }
    m.links.push_back(row);
  }
  if (m.gpus.empty())
    throw std::runtime_error("nvidia-smi topo -m: no GPU matrix in its output (expected a header row with GPU0 ...)");
  if (m.links.size() != m.gpus.size())
    throw std::runtime_error("nvidia-smi topo -m: " + std::to_string(m.links.size()) + " GPU rows for " +
                             std::to_string(m.gpus.size()) + " GPU columns");
  return m;
}

std::string describe_links(const LinkMatrix& m) {
  if (m.gpus.size() < 2) return "one GPU: no pairs";
  std::map<std::string, std::vector<std::string>> pairs;
  for (size_t i = 0; i < m.gpus.size(); ++i)
    for (size_t j = i + 1; j < m.gpus.size(); ++j) pairs[m.links[i][j]].push_back(m.gpus[i] + "-" + m.gpus[j]);
  if (pairs.size() == 1) return "every pair " + pairs.begin()->first + " (" + meaning(pairs.begin()->first) + ")";
  std::string s;
  for (const auto& [kind, ps] : pairs) {
    s += (s.empty() ? "" : "; ") + kind + " (" + meaning(kind) + "):";
    for (const auto& p : ps) s += " " + p;
  }
  return s;
}

GpuTopology gpu_topology() {
  GpuTopology t;
  const int64_t n = engine::cuda_device_count();
  for (int64_t i = 0; i < n; ++i) {
    const auto info = engine::device_info(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i)));
    t.gpus.push_back(
        {i, info.name, info.total_memory_bytes,
         std::to_string(info.compute_capability_major) + "." + std::to_string(info.compute_capability_minor),
         engine::cuda_pci_bus_id(i)});
  }
  for (int64_t a = 0; a < n; ++a) {
    std::vector<bool> row;
    for (int64_t b = 0; b < n; ++b) row.push_back(a != b && engine::cuda_peer_access(a, b));
    t.peer_access.push_back(row);
  }
  if (n == 0) return t;
  std::string out;
  {
    std::unique_ptr<FILE, int (*)(FILE*)> p(::popen("nvidia-smi topo -m 2>/dev/null", "r"), ::pclose);
    if (p) {
      std::array<char, 4096> buf;
      size_t got;
      while ((got = std::fread(buf.data(), 1, buf.size(), p.get())) > 0) out.append(buf.data(), got);
    }
  }
  try {
    const LinkMatrix m = parse_topo_matrix(out);
    t.links = GpuLinks{m.gpus, m.links, describe_links(m)};
  } catch (const std::exception& e) {
    t.links_error = out.empty() ? "nvidia-smi topo -m printed nothing (nvidia-smi not on PATH?)" : e.what();
  }
  return t;
}

}  // namespace ampcheck::doctor
