// Sealing and verifying golden trajectories (golden.h).
#include "validate/golden.h"

#include "inject/injection.h"
#include "io/fnv1a.h"
#include "reference/reference_store.h"

#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

namespace ampcheck::validate {

namespace {
// FNV-1a over bytes, fed in pieces; every piece is length-prefixed so that no two contents hash the same text
struct Fnv {
  uint64_t h = io::kFnv1aOffset;
  void bytes(const void* p, size_t n) { h = io::fnv1a(h, p, n); }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
  void text(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void doubles(const std::vector<double>& v) {
    u64(v.size());
    for (double d : v) bytes(&d, sizeof d);  // the bits: NaN payloads and signed zeros count
  }
};

std::string hex16(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// "lr=0.001 -> lr=0.002, steps=40 -> steps=10": the tokens of two canonical texts that differ
std::string text_difference(const std::string& golden, const std::string& here) {
  auto tokens = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string t; in >> t;) out.push_back(t);
    return out;
  };
  const auto g = tokens(golden), h = tokens(here);
  std::string out;
  const std::set<std::string> gs(g.begin(), g.end()), hs(h.begin(), h.end());
  for (const auto& t : g)
    if (!hs.count(t)) out += (out.empty() ? "" : ", ") + ("golden " + t);
  for (const auto& t : h)
    if (!gs.count(t)) out += (out.empty() ? "" : ", ") + ("here " + t);
  return out.size() > 400 ? out.substr(0, 400) + "..." : out;
}

// the part of a reader's message before its own HINT (which speaks of results, not goldens)
std::string without_hint(const std::string& what) {
  const size_t at = what.find("HINT:");
  std::string s = at == std::string::npos ? what : what.substr(0, at);
  while (!s.empty() && (s.back() == ' ' || s.back() == '.')) s.pop_back();
  return s;
}
}  // namespace

std::string re_record_hint() {
  return "HINT: re-record the golden on a known-good machine (`ampcheck validate --record --force` there, then copy "
         "references/validate/<class>/ here); this is bad input, not a fault of this machine";
}

std::string golden_config_text(const engine::RunConfig& run) {
  std::ostringstream os;
  os << reference::reference_key(run).canonical << " strategy=" << run.strategy.name << " {" << run.strategy.describe()
     << "}"
     << " engine=" << models::head_loss_name(run.model.head_loss) << "/" << run.model.head_chunk_rows << "/"
     << run.model.fused_layernorm << run.model.fused_bias_gelu << run.model.gemm_epilogues << run.loop.cuda_graphs
     << run.optimizer.fused << " pitfalls=" << run.loop.clip_unscale_first << run.loop.call_update
     << run.loop.unscale_each_micro_batch << run.loop.divide_loss_by_micro_batches << run.loop.step_through_scaler
     << run.loop.scale_loss << run.loop.zero_grad << " attention_query=" << run.model.attention_query_dtype
     << " injections=" << inject::injections(run).size();
  return os.str();
}

std::string golden_config_hash(const engine::RunConfig& run) {
  Fnv f;
  const std::string text = golden_config_text(run);
  f.bytes(text.data(), text.size());
  return hex16(f.h);
}

std::string content_checksum(const trajectory::TrajectoryFile& file) {
  static const std::set<std::string> left_out = {"golden_checksum", "format", "format_version", "events"};
  Fnv f;
  f.text("ampcheck-golden-v1");
  for (const auto& [k, v] : trajectory::attribute_map(file.attributes))  // a std::map: in name order
    if (!left_out.count(k)) {
      f.text(k);
      f.text(v);
    }
  const auto& t = file.trajectory;
  f.u64(static_cast<uint64_t>(t.size()));
  for (int c = 0; c < trajectory::kNumColumns; ++c) {
    f.text(trajectory::column_name(c));
    f.doubles(t.column(c));
  }
  const auto& d = t.digests;
  f.u64(d.tensors.size());
  for (const auto& name : d.tensors) f.text(name);
  for (const auto* m : {&d.params, &d.grads}) {
    f.u64(m->size());
    for (const auto& row : *m) {
      f.u64(row.size());
      for (uint64_t x : row) f.u64(x);
    }
  }
  for (const auto& [name, values] : file.series) {
    f.text(name);
    f.doubles(values);
  }
  return "fnv1a64:" + hex16(f.h);
}

void seal_golden(trajectory::TrajectoryFile& file, const engine::RunConfig& run) {
  file.attributes.golden_config = golden_config_text(run);
  file.attributes.golden_config_hash = golden_config_hash(run);
  file.attributes.golden_steps = static_cast<int64_t>(file.trajectory.size());
  file.attributes.golden_checksum = content_checksum(file);
}

void verify_golden(const trajectory::TrajectoryFile& file, const std::string& path, const engine::RunConfig& run) {
  const trajectory::RunAttributes& a = file.attributes;
  const std::string stored = a.golden_checksum.value_or("");
  if (stored.empty())
    throw BadGolden(path +
                    ": golden without a content checksum (attribute 'golden_checksum'; written by an older "
                    "ampcheck, or not by ampcheck): it cannot be trusted. " +
                    re_record_hint() + "; or, for a golden you trust, seal it: `ampcheck validate --seal " + path +
                    "`");
  const std::string computed = content_checksum(file);
  if (stored != computed)
    throw BadGolden(path + ": golden fails its content checksum (attribute 'golden_checksum' " + stored + ", content " +
                    computed + "): the file is corrupt or was edited. " + re_record_hint());
  const std::string name = a.scenario_name.value_or("");
  if (name != run.name)
    throw BadGolden(path + ": golden of scenario '" + name + "' (attribute 'scenario_name'), not of '" + run.name +
                    "'. " + re_record_hint());
  const std::string steps = a.golden_steps ? std::to_string(*a.golden_steps) : "";
  if (a.golden_steps != run.loop.steps || file.trajectory.size() != run.loop.steps)
    throw BadGolden(path + ": golden of " + std::to_string(file.trajectory.size()) +
                    " steps (attribute 'golden_steps' " + steps + "), this run has " + std::to_string(run.loop.steps) +
                    ": a golden is compared only at its own length. HINT: run without --steps (the golden's length), "
                    "or record goldens of this length on a known-good machine");
  const std::string hash = a.golden_config_hash.value_or("");
  if (hash != golden_config_hash(run))
    throw BadGolden(path + ": golden of another configuration of '" + run.name + "' (attribute 'golden_config_hash' " +
                    hash + ", this scenario " + golden_config_hash(run) +
                    "; differing: " + text_difference(a.golden_config.value_or(""), golden_config_text(run)) +
                    "): the scenario changed since it was recorded. " + re_record_hint());
}

trajectory::TrajectoryFile read_golden(const std::string& path, const engine::RunConfig& run) {
  trajectory::TrajectoryFile file;
  try {
    file = trajectory::read_trajectory_contained(path);
  } catch (const std::exception& e) {
    const std::string what = without_hint(e.what());
    throw BadGolden((what.rfind(path, 0) == 0 ? what : path + ": " + what) + " (unreadable golden). " +
                    re_record_hint());
  }
  verify_golden(file, path, run);
  return file;
}

}  // namespace ampcheck::validate
