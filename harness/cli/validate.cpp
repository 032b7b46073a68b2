// `ampcheck validate`: the validation suite's scenarios on this stack, each compared with its golden trajectory — bit
// for bit where this stack's fingerprint matches the golden's, a differing step replayed to tell a transient fault
// from a persistent difference — and judged statistically against its FP32 references where it does not (or where
// this device class has no golden: the nearest class's, said so). validate/validate.h has the pieces.
#include "cli/commands.h"
#include "cli/output_dir.h"
#include "cli/verdict_rows.h"

#include "engine/device.h"
#include "reference/reference_store.h"
#include "reference/trajectory_file.h"
#include "report/html.h"
#include "report/summary.h"
#include "run/progress.h"
#include "run/provenance.h"
#include "validate/validate.h"
#include "verdict/verdict.h"

#include <ATen/Parallel.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

namespace ampcheck::cli {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> subdirectories(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  return out;
}

// The golden of `name`: this class's, else the nearest class's that has one. {path, class}; {"", ""} if none.
std::pair<std::string, std::string> find_golden(const std::string& root, const std::string& cls, const std::string& name) {
  if (file_exists(validate::golden_path(root, cls, name))) return {validate::golden_path(root, cls, name), cls};
  for (const auto& other : validate::nearest_classes(cls, subdirectories(root + "/validate")))
    if (file_exists(validate::golden_path(root, other, name))) return {validate::golden_path(root, other, name), other};
  return {"", ""};
}

// The FP32 reference's device class for the statistical verdict: this device's, else the nearest that has one.
std::string reference_class(const std::string& root, const std::string& device_class, const engine::RunConfig& run) {
  const std::string key = reference::reference_key(run).key;
  if (file_exists(reference::reference_path(root, device_class, key))) return device_class;
  std::vector<std::string> classes;
  for (const auto& c : subdirectories(root))
    if (c != "validate") classes.push_back(c);
  for (const auto& other : validate::nearest_classes(device_class, classes))
    if (file_exists(reference::reference_path(root, other, key))) return other;
  return "";
}

std::string joined(const std::vector<std::string>& xs) {
  std::string s;
  for (const auto& x : xs) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

int cmd_validate(RunOptions opts, const ValidateOptions& v) {
  // one intra-op thread: a golden then does not depend on the machine's core count (a different split of a reduction
  // over threads changes its bits); the validation scenarios are small
  at::set_num_threads(1);
  if (opts.scenarios.empty() && opts.suite.empty()) opts.suite = "validate";
  const auto files = resolve_scenario_files(opts);
  if (const auto why = why_skipped(files, opts); !why.empty()) {
    std::cout << "SKIPPED: " << why << "\n";
    return 77;
  }
  std::vector<validate::Plant> plants;
  std::vector<std::string> plant_texts;
  for (const auto& t : v.plants) {
    plants.push_back(validate::parse_plant(t));
    plant_texts.push_back(t);
  }
  if (v.record && !plants.empty()) throw std::invalid_argument("--record with --plant: a golden must not carry a planted fault");
  if (v.replays < 2) throw std::invalid_argument("--replays " + std::to_string(v.replays) + ": at least 2 (a fault that varies shows between replays)");
  const std::string root = opts.references.empty() ? references_dir() : opts.references;
  // written whole: the run directory appears complete or not at all (--record writes goldens, no run directory)
  std::unique_ptr<RunDirectory> out;
  if (!v.record) {
    refuse_existing_run_outputs(files, opts);  // before any training: nothing run, nothing written
    out = std::make_unique<RunDirectory>(opts);
    opts = out->staged(opts);
  }
  if (v.record) refuse_duplicate_scenario_names(files, opts);  // two goldens would share one <name>.h5

  report::RunSummary summary;
  std::map<std::string, double> peak_tflops;
  int recorded = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    scenario::Scenario sc = load_for_run(files[i], opts);
    const at::Device device = run_device(sc, opts);
    if (opts.steps > 0) sc.run.loop.steps = opts.steps;
    sc.run.loop.digests = true;
    sc.run.loop.log_every = 1;
    const auto fp = engine::stack_fingerprint(device);
    const std::string cls = validate::golden_class(fp);
    std::cout << "[" << (i + 1) << "/" << files.size() << "] " << sc.run.name << " (" << sc.run.strategy.name << ", "
              << cls << ")\n" << std::flush;

    if (v.record) {  // this stack's golden
      const std::string path = validate::golden_path(root, cls, sc.run.name);
      refuse_unless_replaceable_file(path, opts.force, kGoldenFile);  // only a golden ampcheck wrote is replaced
      const auto r = engine::run_scenario(sc, opts.device, 0, engine::terminal_progress(sc.run.loop.steps));
      if (r.outcome.status != engine::RunOutcome::Status::Completed)
        throw std::runtime_error("golden run '" + sc.run.name + "' ended " + engine::status_name(r.outcome.status) +
                                 (r.outcome.error.empty() ? "" : ": " + r.outcome.error));
      make_dirs(root + "/validate/" + cls);
      reference::TrajectoryFile tf = result_file(sc, device, r);
      tf.attributes["golden_class"] = cls;
      reference::write_trajectory(path, tf, opts.force);
      std::cout << "  golden: " << path << "\n";
      ++recorded;
      continue;
    }

    if (summary.device_class.empty()) set_provenance(summary, sc, device);
    report::ScenarioSummary row = scenario_row(sc, device);
    auto& val = row.validation;
    val.plants = joined(plant_texts);
    try {
      const scenario::Scenario planted = [&] {
        scenario::Scenario p = sc;
        p.run = validate::planted(sc.run, plants, /*replay=*/false);
        return p;
      }();
      const auto r = engine::run_scenario(planted, opts.device, 0, engine::terminal_progress(sc.run.loop.steps));
      fill_measurements(row, r, device, peak_tflops);
      row.trajectory_file = sc.run.name + ".h5";
      reference::TrajectoryFile tf = result_file(sc, device, r);

      // the golden: bitwise where the stack matches
      const auto [golden_file, golden_cls] = find_golden(root, cls, sc.run.name);
      val.golden = golden_file;
      val.golden_class = golden_cls;
      bool bitwise = false;
      std::string bitwise_line;
      if (!golden_file.empty()) {
        const auto golden = reference::read_trajectory_contained(golden_file);
        const auto diffs = validate::stack_differences(golden.attributes, fp);
        val.stack_differences = validate::describe(diffs);
        const bool bits_may_differ =
            std::any_of(diffs.begin(), diffs.end(), [](const validate::StackDifference& d) { return d.changes_bits; });
        bitwise = golden_cls == cls && !bits_may_differ;
        val.mode = bitwise ? "bitwise" : "statistical";
        const auto cmp = validate::compare_bitwise(r.trajectory, golden.trajectory);
        val.identical = cmp.identical;
        val.first_step = cmp.identical ? -1 : cmp.step;
        val.first_difference = cmp.message;
        bitwise_line = "bitwise against the " + golden_cls + " golden: " + cmp.message;
        if (bitwise && !cmp.identical && r.trajectory.size() > cmp.step && !r.trajectory.digests.empty()) {
          const auto rep = validate::replay_step(validate::planted(sc.run, plants, /*replay=*/true), device, cmp.step,
                                                 r.trajectory, golden.trajectory, static_cast<int>(v.replays),
                                                 opts.out_dir);
          val.replay = rep.kind;
          val.replay_message = rep.message;
        }
      } else {
        val.mode = "statistical";
        bitwise_line = "no golden for " + sc.run.name + " in " + root + "/validate (record one with `ampcheck validate --record`)";
      }

      // the statistical verdict against the FP32 references (this class's, else the nearest's)
      val.reference_class = reference_class(root, row.device_class, sc.run);
      std::string statistical_line;
      if (!val.reference_class.empty()) {
        const auto ref = reference::load_reference(root, val.reference_class, sc.run, opts.suite);
        verdict::Verdict verd = verdict::judge(engine::status_name(r.outcome.status), r.outcome.error, r.trajectory,
                                               ref.file.trajectory, ref.noise, sc.tolerance);
        if (r.outcome.status == engine::RunOutcome::Status::Completed)
          verdict::add_engine_run_warnings(verd, r.trajectory, sc.run.strategy, device.is_cuda(), ref.file.trajectory,
                                           ref.noise);
        const auto decision =
            verdict::decide(scenario::expectation(sc.expect), verdict::observe(verd, r.outcome.error), opts.strict);
        verd.message = decision.verdict_message;
        fill_result(row, verd, decision);
        val.statistical_verdict = verd.verdict;
        tf.attributes["reference"] = ref.path;
        add_verdict_series(tf, verd, ref.file.trajectory, ref.loss_spread);
        statistical_line = "statistical verdict against the " + val.reference_class + " FP32 references" +
                           (val.reference_class == row.device_class ? "" : " (the nearest class: none for " + row.device_class + ")") +
                           ": " + row.verdict;
      } else {
        statistical_line = "no FP32 reference for a statistical verdict (`ampcheck record --suite " +
                           (opts.suite.empty() ? std::string("validate") : opts.suite) + "`)";
        row.pass = false;
      }

      // the decision: bitwise where the stack matches, else the statistical verdict
      std::ostringstream msg;
      if (bitwise) {
        row.pass = val.identical;
        row.verdict = val.identical ? "identical" : val.replay.empty() ? "differs" : val.replay;
        msg << (val.identical ? "bit for bit the golden's" : "NOT bit for bit the golden's") << " (" << bitwise_line
            << ")";
        if (!val.replay_message.empty()) msg << "; " << val.replay_message;
        msg << "; " << statistical_line;
      } else {
        msg << "statistical";
        if (!val.stack_differences.empty()) msg << " (the stack differs from the golden's: " << val.stack_differences << ")";
        else if (!golden_cls.empty() && golden_cls != cls) msg << " (no golden of class " << cls << ")";
        msg << ": " << statistical_line << "; " << bitwise_line;
        if (!row.message.empty()) msg << "; " << row.message;
      }
      row.message = msg.str();
      tf.attributes["validation"] = row.verdict + ": " + row.message;
      write_result(opts, row.trajectory_file, tf);
    } catch (const std::exception& e) {
      row.pass = false;
      row.message = e.what();
    }
    if (!row.pass) std::cout << "  FAIL " << row.name << ": " << row.message << "\n";
    summary.scenarios.push_back(row);
  }
  if (v.record) {
    std::cout << recorded << " golden(s) recorded under " << root << "/validate\n";
    return 0;
  }
  summary.suite = opts.suite;
  summary.strict = opts.strict;
  print_result_table(summary);
  for (const auto& s : summary.scenarios)
    std::cout << "VALIDATE " << s.name << ": " << s.validation.mode << " — " << s.message << "\n";
  report::write_run_reports(opts.out_dir, summary);
  report::write_html_report(opts.out_dir, summary);
  out->publish();
  std::cout << "reports: " << out->final_dir() << "/{summary.json,junit.xml,summary.md,report.html}\n";
  std::cout << summary.passed() << " passed, " << summary.failed() << " failed\n";
  return summary.failed() == 0 ? 0 : 1;
}

}  // namespace ampcheck::cli
