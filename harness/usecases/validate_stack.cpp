// validate: the validation suite's scenarios on this stack, each compared with its golden trajectory — bit
// for bit where this stack's fingerprint matches the golden's, a differing step replayed to tell a transient fault
// from a persistent difference — and judged statistically against its FP32 references where it does not (or where
// this device class has no golden: the nearest class's, said so). Everything that is bad input — the reference root,
// a golden that fails its seal (validate/golden.h), a plant that cannot act, nothing to compare with — is refused
// (exit 2) before anything trains. validate/validate.h has the pieces.
#include "usecases/judge_engine_run.h"
#include "usecases/result_rows.h"
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"
#include "usecases/usecases.h"

#include "engine/device.h"
#include "io/files.h"
#include "io/text.h"
#include "reference/reference_store.h"
#include "trajectory/trajectory_file.h"
#include "report/summary.h"
#include "run/progress.h"
#include "run/provenance.h"
#include "validate/golden.h"
#include "validate/validate.h"
#include "verdict/verdict.h"

#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <tuple>
#include <cstdlib>

namespace ampcheck::usecases {

namespace {

namespace fs = std::filesystem;

// The golden of `name`: this class's, else the nearest class's that has one. {path, class}; {"", ""} if none.
std::pair<std::string, std::string> find_golden(const std::string& root, const std::string& cls,
                                                const std::string& name) {
  if (io::file_exists(validate::golden_path(root, cls, name))) return {validate::golden_path(root, cls, name), cls};
  for (const auto& other : validate::nearest_classes(cls, io::subdirectories(root + "/validate")))
    if (io::file_exists(validate::golden_path(root, other, name)))
      return {validate::golden_path(root, other, name), other};
  return {"", ""};
}

// The reference root validate reads: it must be a directory, and (unless recording) hold goldens under validate/.
// Bad input, before anything trains: throws naming the path and what was expected.
void check_reference_root(const std::string& root, bool named, bool record) {
  std::error_code ec;
  const std::string what = named ? "--references '" + root + "'" : "the reference root '" + root + "'";
  if (record && !fs::exists(fs::symlink_status(root, ec)))
    return;  // --record makes a new root (a dangling link: below)
  if (!fs::exists(root, ec))
    throw std::invalid_argument(what +
                                " does not exist (expected a directory holding validate/<class>/ goldens and "
                                "<class>/ FP32 references). HINT: pass the reference root, e.g. references/");
  if (!fs::is_directory(root, ec))
    throw std::invalid_argument(what +
                                " is not a directory (expected the reference root holding validate/<class>/ "
                                "goldens, not a file). HINT: pass its directory, e.g. references/");
  if (record) return;
  bool any = false;
  for (const auto& cls : io::subdirectories(root + "/validate"))
    for (const auto& e : fs::directory_iterator(root + "/validate/" + cls, ec))
      if (e.path().extension() == ".h5") any = true;
  if (!any)
    throw std::invalid_argument(
        what + " holds no goldens (expected " + root +
        "/validate/<class>/<scenario>.h5): a bitwise validation has nothing to compare with. "
        "HINT: record goldens on a known-good machine (`ampcheck validate --record --references " +
        root + "`), or pass the reference root that has them");
}

// One scenario as validate runs it, everything decided before it trains.
struct ValidationPlan {
  scenario::Scenario sc;
  at::Device device{at::kCPU};
  validate::Fingerprint fp;
  std::string cls;  // this stack's golden class
  std::string golden_path, golden_cls;
  trajectory::TrajectoryFile golden;  // read and verified (golden.h)
  std::vector<validate::StackDifference> diffs;
  bool bitwise = false;
  std::string reason;           // why this mode
  std::string next;             // what to do next in statistical mode
  std::string reference_class;  // the FP32 references of the statistical verdict ("" if none)
};

std::string differing_keys(const std::vector<validate::StackDifference>& diffs, bool environment, bool bit_changing) {
  std::vector<validate::StackDifference> pick;
  for (const auto& d : diffs)
    if (validate::is_environment_key(d.key) == environment && (!bit_changing || d.changes_bits)) pick.push_back(d);
  return validate::describe(pick);
}

ValidationPlan prepare(const std::string& file, const RunOptions& opts, const std::string& root,
                       const std::vector<validate::Plant>& plants) {
  ValidationPlan p;
  p.sc = load_for_run(file, opts);
  scenario::Scenario& sc = p.sc;
  if (opts.steps > 0) sc.run.loop.steps = opts.steps;
  sc.run.loop.digests = true;
  sc.run.loop.log_every = 1;
  p.device = run_device(sc, opts);
  p.fp = engine::stack_fingerprint(p.device);
  p.cls = validate::golden_class(p.fp);
  if (!plants.empty()) {  // a plant that cannot act is refused here, not discovered after training
    const auto shapes = validate::parameter_shapes(sc.run);
    for (const auto& plant : plants) validate::check_plant(plant, shapes, sc.run.loop.steps);
  }
  std::tie(p.golden_path, p.golden_cls) = find_golden(root, p.cls, sc.run.name);
  const std::string record_hint = "record goldens for " + p.cls +
                                  " on a known-good machine of this class (`ampcheck "
                                  "validate --record`, which writes references/validate/" +
                                  p.cls + "/)";
  const std::string statistical_limit = "statistical mode catches only gross faults, not bit flips";
  if (!p.golden_path.empty()) {
    p.golden = validate::read_golden(p.golden_path, sc.run);  // bad input (exit 2) if corrupt, foreign or stale
    p.diffs = validate::stack_differences(trajectory::attribute_map(p.golden.attributes), p.fp);
    const std::string env_drift = differing_keys(p.diffs, true, true);
    const std::string stack_drift = differing_keys(p.diffs, false, true);
    p.bitwise = p.golden_cls == p.cls && env_drift.empty() && stack_drift.empty();
    if (p.bitwise) {
      p.reason = "the stack matches the " + p.cls + " golden's";
    } else if (p.golden_cls != p.cls) {
      p.reason = "no golden of class " + p.cls + " for this scenario; the nearest class's (" + p.golden_cls +
                 ") is compared for information";
      p.next = record_hint + "; " + statistical_limit;
    } else if (!env_drift.empty()) {
      p.reason = "configuration drift from the golden's settings: " + env_drift +
                 (stack_drift.empty() ? "" : "; the stack differs too: " + stack_drift);
      p.next = "for a bitwise check run with the golden's settings (" + env_drift +
               "), or record goldens with these settings on a known-good machine; " + statistical_limit;
    } else {
      p.reason = "the stack differs from the golden's: " + stack_drift;
      p.next =
          "for a bitwise check record goldens of this stack on a known-good machine of the same kind (`ampcheck "
          "validate --record --force`); " +
          statistical_limit;
    }
  } else {
    p.reason = "no golden for " + sc.run.name + " in " + root + "/validate";
    p.next = record_hint + "; " + statistical_limit;
  }
  p.reference_class = fp32_reference_class(root, engine::device_info(p.device).device_class, sc.run);
  if (!p.bitwise && p.reference_class.empty())
    throw std::invalid_argument(sc.run.name + ": " + p.reason + ", and no FP32 reference under " + root +
                                " for the statistical verdict (expected " +
                                reference::reference_path(root, "<class>", reference::reference_key(sc.run).key) +
                                "). HINT: record goldens on a known-good machine (`ampcheck validate --record`) or "
                                "the FP32 references (`ampcheck record --suite " +
                                (opts.suite.empty() ? std::string("validate") : opts.suite) + "`)");
  return p;
}

// --seal: the seal (golden.h) added to goldens recorded before it existed, from each file's own content: the scenario
// from its scenario_text attribute, the length from its steps. A file already sealed is checked, not rewritten; one
// that fails its checksum is refused (a seal must never bless a corrupt file).
void seal_each(const std::vector<std::string>& paths, std::ostream& log) {
  for (const auto& path : paths) {
    trajectory::TrajectoryFile f = trajectory::read_trajectory_contained(path);
    const trajectory::RunAttributes& a = f.attributes;
    if (a.golden_checksum) {
      if (*a.golden_checksum != validate::content_checksum(f))
        throw validate::BadGolden(path + ": sealed golden fails its content checksum; refusing to seal it again. " +
                                  validate::re_record_hint());
      log << path << ": already sealed (" << *a.golden_checksum << ")\n";
      continue;
    }
    if (!a.golden_class || !a.scenario_text)
      throw std::invalid_argument(path +
                                  ": not a golden (expected the attributes 'golden_class' and 'scenario_text' "
                                  "that `ampcheck validate --record` writes)");
    scenario::Scenario sc = scenario::parse_scenario(*a.scenario_text, path + " (attribute scenario_text)");
    if (sc.run.name != a.scenario_name.value_or(""))
      throw std::invalid_argument(path + ": attribute 'scenario_name' '" + a.scenario_name.value_or("") +
                                  "' is not the name in its 'scenario_text' ('" + sc.run.name + "')");
    sc.run.loop.steps = f.trajectory.size();  // the length it was recorded at
    validate::seal_golden(f, sc.run);
    trajectory::write_trajectory(path, f, /*overwrite=*/true);
    validate::read_golden(path, sc.run);  // what was written reads back sealed
    log << path << ": sealed (" << a.golden_checksum.value_or("") << ", config " << a.golden_config_hash.value_or("")
        << ", " << (a.golden_steps ? std::to_string(*a.golden_steps) : "") << " steps)\n";
  }
}

// --record: this stack's goldens, sealed (golden.h); every refusal (an existing golden without --force) before any
// training.
void record_each(const std::vector<std::string>& files, const RunOptions& opts, const std::string& root,
                 std::ostream& log) {
  struct Todo {
    scenario::Scenario sc;
    at::Device device;
    std::string cls, path;
  };
  refuse_duplicate_scenario_names(files, opts);  // two goldens would share one <name>.h5
  std::vector<Todo> todo;
  for (const auto& file : files) {  // every golden checked before any trains
    scenario::Scenario sc = load_for_run(file, opts);
    if (opts.steps > 0) sc.run.loop.steps = opts.steps;
    sc.run.loop.digests = true;
    sc.run.loop.log_every = 1;
    const at::Device device = run_device(sc, opts);
    const std::string cls = validate::golden_class(engine::stack_fingerprint(device));
    const std::string path = validate::golden_path(root, cls, sc.run.name);
    refuse_unless_replaceable_file(path, opts.force, kGoldenFile);  // only a golden ampcheck wrote is replaced
    todo.push_back({std::move(sc), device, cls, path});
  }
  for (size_t i = 0; i < todo.size(); ++i) {
    const Todo& t = todo[i];
    log_scenario_start(log, i, todo.size(), t.sc, t.cls);
    const auto r = run::train_scenario(t.sc, opts.device, 0, run::terminal_progress(t.sc.run.loop.steps));
    if (r.outcome.status != engine::RunOutcome::Status::Completed)
      throw std::runtime_error("golden run '" + t.sc.run.name + "' ended " + engine::status_name(r.outcome.status) +
                               (r.outcome.error.empty() ? "" : ": " + r.outcome.error));
    io::make_dirs(root + "/validate/" + t.cls);
    trajectory::TrajectoryFile tf = run::result_file(t.sc, t.device, r);
    tf.attributes.golden_class = t.cls;
    validate::seal_golden(tf, t.sc.run);
    trajectory::write_trajectory(t.path, tf, opts.force);
    validate::read_golden(t.path, t.sc.run);  // it reads back sealed: the checksum covers what was written
    log << "  golden: " << t.path << " (" << tf.attributes.golden_checksum.value_or("") << ")\n";
  }
  log << todo.size() << " golden(s) recorded under " << root << "/validate\n";
}

// The plant's first step (-1: none).
int64_t first_plant_step(const std::vector<validate::Plant>& plants) {
  int64_t step = -1;
  for (const auto& pl : plants)
    for (const auto& inj : pl.injections)
      for (int64_t s : inj.steps) step = step < 0 ? s : std::min(step, s);
  return step;
}

// What validate decides for one scenario, in words: the mode and why, the result, what to do next.
struct Words {
  std::string reason, result, next;
};

// The statistical verdict against the FP32 references (this class's, else the nearest's), through judge_run: into
// the row and the result file; returns its sentence ("" where there is no reference).
std::string judge_statistically(const ValidationPlan& p, const run::ScenarioResult& r, const RunOptions& opts,
                                const std::string& root, report::ScenarioSummary& row, trajectory::TrajectoryFile& tf) {
  if (p.reference_class.empty()) return "";
  const scenario::Scenario& sc = p.sc;
  const auto ref = reference::load_reference(root, p.reference_class, sc.run, opts.suite);
  const Judged j = judge_engine_run(r, sc.run.strategy, p.device, {ref.file.trajectory, ref.noise},
                                    scenario::expectation(sc.expect), sc.tolerance, opts.strict);
  record_judgement(j, ref, row, tf, VerdictInFile::Left);
  row.validation.statistical_verdict = j.verdict.verdict;
  return "the statistical verdict against the " + p.reference_class + " FP32 references" +
         (p.reference_class == row.device_class ? "" : " (the nearest class: none for " + row.device_class + ")") +
         " is " + row.verdict + (row.message.empty() ? "" : " (" + row.message + ")");
}

// The bitwise verdict (identical | differs | transient | persistent) decided by the pass rule (verdict::decide: a
// validation run is expected to be identical), into the row.
void decide_bitwise(report::ScenarioSummary& row, const std::string& bitwise_verdict, const std::string& message) {
  verdict::Verdict v;
  v.verdict = bitwise_verdict;
  v.message = message;
  verdict::Expectation expected;
  expected.verdict = "identical";
  const auto d = verdict::decide(expected, verdict::observe(v, ""), /*strict=*/false);
  row.verdict = v.verdict;
  row.pass = d.pass;
}

// The run compared bit for bit with its golden where the stack matches; a differing step replayed to class it.
void judge_bitwise(const ValidationPlan& p, const run::ScenarioResult& r, const validate::BitwiseComparison& cmp,
                   const std::vector<validate::Plant>& plants, const ValidateOptions& v, const RunOptions& opts,
                   report::ScenarioSummary& row, const std::string& statistical, Words& w) {
  auto& val = row.validation;
  if (cmp.identical) {
    w.result = "PASS: bit for bit the golden's (" + cmp.message + ")";
    const int64_t plant_step = first_plant_step(plants);
    if (!plants.empty())
      w.result += "; the plant" + std::string(plants.size() > 1 ? "s" : "") +
                  (plant_step >= 0 ? " at step " + std::to_string(plant_step) : "") +
                  " had no measurable effect: the run is bit for bit the golden's";
    if (!p.diffs.empty()) w.result += "; the stack differs only where bits do not (" + val.stack_differences + ")";
    decide_bitwise(row, "identical", w.result);
    return;
  }
  if (!p.diffs.empty()) {
    // a difference with a fingerprint that differs (in keys thought not to change bits): drift, never the machine
    val.mode = "statistical";
    w.reason = "the run differs bitwise (" + cmp.message + ") while the stack differs from the golden's (" +
               val.stack_differences + "): configuration drift, not a fault of this machine";
    w.next =
        "run with the golden's settings for a bitwise check, or record goldens with these settings on a "
        "known-good machine; statistical mode catches only gross faults, not bit flips";
    std::string said = statistical;
    if (said.empty()) {
      row.pass = false;
      said = "no FP32 reference to decide with (`ampcheck record --suite validate`)";
    }
    w.result = std::string(row.pass ? "PASS" : "FAIL") + ": " + said;
    return;
  }
  w.result = "FAIL: NOT bit for bit the golden's: " + cmp.message;
  std::string kind = "differs";
  if (r.trajectory.size() > cmp.step && !r.trajectory.digests.empty()) {
    const auto rep =
        validate::replay_step(validate::planted(p.sc.run, plants, /*replay=*/true), p.device, cmp.step, r.trajectory,
                              p.golden.trajectory, static_cast<int>(v.replays), opts.out_dir);
    val.replay = validate::to_string(rep.kind);
    val.replay_message = rep.message;
    kind = validate::to_string(rep.kind);
    w.result += "; " + rep.message;
    w.next = rep.kind == validate::ReplayKind::Transient
                 ? "re-run validate: a fault that comes and goes points at the hardware (memory, GPU, power, "
                   "cooling) — run `ampcheck doctor` and the vendor's diagnostics"
                 : "this stack computes differently from a known-good one with the same fingerprint: run `ampcheck "
                   "doctor` and the vendor's diagnostics, and validate a second machine of the class";
    if (!plants.empty()) w.next = "(a planted fault: the check works as intended)";
  }
  decide_bitwise(row, kind, w.result);
  if (!statistical.empty()) w.result += "; for information, " + statistical;
}

// One prepared scenario trained (with the plants) and decided: its row, its result file.
report::ScenarioSummary validate_one(const ValidationPlan& p, const std::vector<validate::Plant>& plants,
                                     const ValidateOptions& v, const RunOptions& opts, const std::string& root,
                                     MatmulPeaks& peaks) {
  const scenario::Scenario& sc = p.sc;
  report::ScenarioSummary row = scenario_row(sc, p.device);
  auto& val = row.validation;
  val.plants = io::joined(v.plants);
  val.mode = p.bitwise ? "bitwise" : "statistical";  // decided before training: never absent from the row
  val.golden = p.golden_path;
  val.golden_class = p.golden_cls;
  val.stack_differences = validate::describe(p.diffs);
  val.reference_class = p.reference_class;
  Words w{p.reason, "", p.next};
  try {
    scenario::Scenario planted = sc;
    planted.run = validate::planted(sc.run, plants, /*replay=*/false);
    const auto r = run::train_scenario(planted, opts.device, 0, run::terminal_progress(sc.run.loop.steps));
    fill_measurements(row, r, peaks.tflops_for(r, p.device));
    row.trajectory_file = sc.run.name + ".h5";
    trajectory::TrajectoryFile tf = run::result_file(sc, p.device, r);
    validate::BitwiseComparison cmp;  // with the golden (read and verified), where there is one
    if (!p.golden_path.empty()) {
      cmp = validate::compare_bitwise(r.trajectory, p.golden.trajectory);
      val.identical = cmp.identical;
      val.first_step = cmp.identical ? -1 : cmp.step;
      val.first_difference = cmp.message;
    }
    const std::string statistical = judge_statistically(p, r, opts, root, row, tf);
    if (p.bitwise) {
      judge_bitwise(p, r, cmp, plants, v, opts, row, statistical, w);
    } else {
      w.result = std::string(row.pass ? "PASS" : "FAIL") + ": " + statistical;
      if (!p.golden_path.empty())
        w.result += "; for information, the bitwise comparison with the " + p.golden_cls + " golden: " +
                    (cmp.identical ? "identical"
                                   : "differs from step " + std::to_string(cmp.step) +
                                         " on, as expected where the stacks differ");
      if (!row.pass)
        w.next =
            "the run does not track its FP32 references: a gross fault or a broken stack — run `ampcheck "
            "doctor`; " +
            w.next;
    }
    tf.attributes.validation = row.verdict + ": " + w.result;
    write_result(opts, row.trajectory_file, tf);
  } catch (const std::exception& e) {
    row.pass = false;
    w.result = std::string("FAIL: the run did not complete: ") + e.what();
  }
  row.message = val.mode + " (" + w.reason + ") — " + w.result + (w.next.empty() ? "" : ". Next: " + w.next);
  return row;
}

std::vector<validate::Plant> parse_plants(const ValidateOptions& v) {
  std::vector<validate::Plant> plants;
  for (const auto& t : v.plants) plants.push_back(validate::parse_plant(t));
  if (v.record && !plants.empty())
    throw std::invalid_argument("--record with --plant: a golden must not carry a planted fault");
  if (v.replays < 2)
    throw std::invalid_argument("--replays " + std::to_string(v.replays) +
                                ": at least 2 (a fault that varies shows between replays)");
  return plants;
}

}  // namespace

void seal_goldens(const std::vector<std::string>& paths, std::ostream& log) {
  validate::settle_process();
  seal_each(paths, log);
}

SuiteResult validate_stack(RunOptions opts, const ValidateOptions& v, std::ostream& log) {
  validate::settle_process();
  SuiteResult result;
  if (opts.scenarios.empty() && opts.suite.empty()) opts.suite = "validate";
  const auto files = resolve_scenario_files(opts);
  result.skipped = why_skipped(files, opts);
  if (!result.skipped.empty()) return result;
  const std::vector<validate::Plant> plants = parse_plants(v);
  const std::string root = reference_root(opts);
  // ---- bad input before anything trains: the reference root, the goldens (checksum, scenario, length,
  // configuration), the plants, the FP32 references a statistical verdict needs, the outputs
  check_reference_root(root, !opts.references.empty(), v.record);
  if (v.record) {
    record_each(files, opts, root, log);
    result.written = false;  // goldens, not a run directory
    return result;
  }
  std::vector<ValidationPlan> prepared;
  for (const auto& f : files) prepared.push_back(prepare(f, opts, root, plants));
  refuse_existing_run_outputs(files, opts);  // nothing run, nothing written
  RunDirectory out(opts);                    // written whole: the run directory appears complete or not at all
  opts = out.staged(opts);
  MatmulPeaks peaks;  // measured once per compute dtype, for every row's MFU
  for (size_t i = 0; i < prepared.size(); ++i) {
    const ValidationPlan& p = prepared[i];
    log_scenario_start(log, i, prepared.size(), p.sc, p.cls + ", " + (p.bitwise ? "bitwise" : "statistical"));
    if (result.summary.device_class.empty()) set_provenance(result.summary, p.device);
    const auto row = validate_one(p, plants, v, opts, root, peaks);
    if (!row.pass) log << "  FAIL " << row.name << ": " << row.message << "\n";
    result.summary.scenarios.push_back(row);
    result.notes.push_back("VALIDATE " + row.name + ": " + row.message);
  }
  result.summary.suite = opts.suite;
  result.summary.strict = opts.strict;
  publish_reports(out, result);
  return result;
}

}  // namespace ampcheck::usecases
