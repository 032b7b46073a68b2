// The commands that read what earlier runs wrote, and the machine: report (report.html / summary.md again), compare
// (two run directories), list (suites and strategies) and doctor (the device and the all-reduce check).
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"
#include "usecases/usecases.h"

#include "distributed/allreduce_check.h"
#include "distributed/process_group.h"
#include "doctor/doctor.h"
#include "engine/device.h"
#include "engine/precision.h"
#include "io/record_json.h"
#include "report/html.h"
#include "report/summary.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <sys/stat.h>

namespace ampcheck::usecases {

namespace {
// report.html / summary.md in a run directory are replaced only under --force, and only if ampcheck wrote them: a
// regular file that starts as ampcheck's report does (its title, or the summary's heading).
void refuse_unless_report_replaceable(const std::string& path, bool force) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!force) throw std::runtime_error(path + " exists. HINT: --force replaces it (and the other report)");
  std::string head;
  if (S_ISREG(st.st_mode)) {
    std::ifstream in(path, std::ios::binary);
    head.resize(512);
    in.read(&head[0], static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
  }
  const bool ours =
      path.size() >= 3 && path.compare(path.size() - 3, 3, ".md") == 0
          ? head.rfind("### ampcheck: ", 0) == 0
          : head.rfind("<!DOCTYPE html>", 0) == 0 && head.find("<title>ampcheck report") != std::string::npos;
  if (!ours)
    throw std::runtime_error(path + ": not a report ampcheck wrote (" +
                             std::string(S_ISLNK(st.st_mode)   ? "a symbolic link"
                                         : S_ISREG(st.st_mode) ? "other content"
                                                               : "not a regular file") +
                             "); refusing to replace it, with or without --force. HINT: move it away first");
}
}  // namespace

std::vector<std::string> rewrite_reports(const std::string& run_dir, bool force) {
  refuse_incomplete_run_directory(run_dir);
  const auto summary = report::read_summary_json(run_dir + "/summary.json");
  for (const char* name : {"report.html", "summary.md"}) refuse_unless_report_replaceable(run_dir + "/" + name, force);
  report::write_markdown(run_dir + "/summary.md", summary);
  return {report::write_html_report(run_dir, summary), run_dir + "/summary.md"};
}

Comparison compare(const std::string& run_a, const std::string& run_b, const report::CompareThresholds& t) {
  refuse_incomplete_run_directory(run_a);
  refuse_incomplete_run_directory(run_b);
  const auto a = report::read_summary_json(run_a + "/summary.json");
  const auto b = report::read_summary_json(run_b + "/summary.json");
  const auto c = report::compare_runs(a, b, t);
  return {report::format_comparison(a, b, c), c.regressed()};
}

Listing list(const std::string& suite) {
  Listing l;
  if (!suite.empty()) {
    for (const auto& f : scenario::load_suite(scenarios_dir(), suite)) {
      const auto sc = scenario::load_scenario(f);
      l.scenarios.emplace_back(sc.run.name, sc.why);
    }
    return l;
  }
  for (const auto& n : engine::strategy_preset_names())
    l.strategies.emplace_back(n, engine::strategy_preset(n).describe());
  for (const auto& e : std::filesystem::directory_iterator(scenarios_dir() + "/suites"))
    l.suites.push_back(e.path().stem().string());
  return l;
}

DoctorResult doctor(const std::string& device, const DoctorOptions& o) {
  const doctor::DoctorReport report = doctor::doctor_report(device);
  nlohmann::json json = io::record_to_json(report);
  bool ok = report.smoke_test.ok;
  // the all-reduce check (harness/distributed/allreduce_check.h): NCCL over every GPU on a CUDA device, Gloo over 2 CPU
  // processes on the CPU, where that backend is compiled in; --allreduce-ranks N sets the rank count (0: skip)
  const bool cuda = engine::resolve_device(device).is_cuda();
  distributed::AllReduceCheckSpec spec;
  spec.backend = cuda ? "nccl" : "gloo";
  spec.world_size = o.allreduce_ranks >= 0 ? o.allreduce_ranks : cuda ? engine::cuda_device_count() : 2;
  spec.bytes = static_cast<int64_t>((o.allreduce_mb > 0 ? o.allreduce_mb : cuda ? 256.0 : 4.0) * (1 << 20));
  spec.iterations = cuda ? 20 : 5;
  std::optional<distributed::AllReduceCheck> allreduce;
  if (spec.world_size > 0 && (o.allreduce_ranks >= 0 || distributed::backend_available(spec.backend))) {
    allreduce = distributed::run_allreduce_check(spec);
    ok = ok && allreduce->ran && allreduce->correct;
  } else if (spec.world_size > 0) {
    allreduce = distributed::AllReduceCheck{};
    allreduce->spec = spec;
    allreduce->error = "backend " + spec.backend + " not compiled in";
    allreduce->required = false;
  }
  std::string checks;
  if (allreduce) {
    json["allreduce"] = distributed::to_json(*allreduce);
    checks = doctor::doctor_line("all-reduce check", distributed::describe(*allreduce));
  }
  return {json.dump(2) + "\n", doctor::format_doctor(report, checks), ok};
}

}  // namespace ampcheck::usecases
