// sweep: the user's training command once per run, judged strategy by strategy against its own FP32 runs (sweep.h).
#include "usecases/sweep.h"

#include "usecases/recordings.h"
#include "usecases/result_rows.h"
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"
#include "usecases/sweep_answer.h"
#include "usecases/sweep_runs.h"

#include "engine/device.h"
#include "io/files.h"
#include "io/fnv1a.h"
#include "reference/external_run.h"
#include "report/format.h"
#include "report/html.h"
#include "run/provenance.h"
#include "trajectory/run_status.h"
#include "verdict/kind.h"

#include <ATen/Context.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <climits>
#include <ostream>
#include <cstring>
#include <fcntl.h>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ampcheck::usecases {

std::vector<std::string> sweep_strategies(const std::string& device) {
  if (device == "cuda")
    return {"tf32", "bf16-autocast", "fp16-autocast-scaler", "pure-bf16", "fp16-master-weights", "fp8"};
  return {"bf16-autocast", "fp16-autocast-scaler", "pure-bf16"};
}

namespace {

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

// Files larger than this enter the key by size and modification time, not contents (a data file of gigabytes).
constexpr off_t kHashedBytes = 64ll << 20;

// A file an argument names ("train.py", "--config=cfg.yaml"), folded into h: its contents (its size and mtime past
// kHashedBytes); false when the argument names no regular file.
bool fold_file(uint64_t& h, const std::string& path, std::string& covered) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  h = io::fnv1a(h, path.data(), path.size() + 1);
  if (st.st_size > kHashedBytes) {
    const std::string meta =
        std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    h = io::fnv1a(h, meta.data(), meta.size());
    covered += (covered.empty() ? "" : ", ") + path + " (size and time: larger than 64 MiB)";
    return true;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) h = io::fnv1a(h, buf, static_cast<size_t>(n));
  ::close(fd);
  covered += (covered.empty() ? "" : ", ") + path;
  return true;
}

// What the command reads that the FP32 runs' cache key covers besides argv: environment variables that change what a
// training computes or which code it runs (the numerics ones of the stack fingerprint, engine/device.h, and these).
const std::vector<std::string>& keyed_environment() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {"CUDA_VISIBLE_DEVICES", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV",
                                  "PL_GLOBAL_SEED"};
    for (const auto& [key, value] : engine::numerics_environment()) n.push_back(key.substr(4));  // "env_NAME"
    return n;
  }();
  return names;
}

// The FP32 runs' cache key (FNV-1a 64): the command's argv, the directory it runs in, --steps, the contents of every
// file an argument names (the script's own source: `python train.py`, `bash train.sh`; a --config=FILE), and the
// environment variables of keyed_environment(). `covered` says which files it read.
std::string cache_key(const SweepOptions& o, std::string& covered) {
  std::string text;
  for (const auto& a : o.command) text += a + '\0';
  char cwd[4096];
  text += std::string(::getcwd(cwd, sizeof cwd) ? cwd : "?") + '\0' + std::to_string(o.steps) + '\0';
  for (const auto& name : keyed_environment()) {
    const char* v = std::getenv(name.c_str());
    text += name + '=' + (v ? v : "\x01unset") + '\0';
  }
  uint64_t h = io::fnv1a(text);
  for (const auto& a : o.command) {
    if (fold_file(h, a, covered)) continue;
    const auto eq = a.find('=');
    if (a.rfind("-", 0) == 0 && eq != std::string::npos) fold_file(h, a.substr(eq + 1), covered);
  }
  return hex64(h).substr(0, 12);
}

// One sweep per directory at a time: an exclusive lock on <dir>/.sweep.lock, held (its descriptor open) as long as the
// sweep — and its keeper, which inherits it until the command it runs has ended — lives.
struct SweepLock {
  int fd = -1;
  SweepLock(const SweepLock&) = delete;
  SweepLock& operator=(const SweepLock&) = delete;
  explicit SweepLock(const std::string& dir) {
    const std::string path = dir + "/.sweep.lock";
    io::refuse_links_below(dir, path, "the sweep directory");
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error(path + ": cannot open the sweep's lock file (" + std::strerror(errno) + ")");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      char buf[32] = {};
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      ::close(fd);
      throw std::runtime_error(
          dir + ": another sweep (pid " + pid +
          ", or the training it started, still ending) is writing this sweep directory; two sweeps into one --out "
          "would train, reuse and delete each other's runs. HINT: wait for it to end, or name another --out");
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    }  // the pid is for the message only
  }
  ~SweepLock() {
    if (fd >= 0) ::close(fd);
  }
};

SweepPaths prepare_paths(const SweepOptions& o, std::string& covered) {
  SweepPaths p;
  p.dir = o.out_dir;
  open_run_directory_in_place(p.dir);  // new, empty, or an earlier sweep's: never a user's directory
  // absolute paths (the plan's contract): the user's command may change its working directory
  if (char* real = ::realpath(p.dir.c_str(), nullptr)) {
    p.dir = real;
    std::free(real);
  }
  p.key = cache_key(o, covered);
  p.workload = "sweep-" + p.key;
  p.runs = p.dir + "/runs/" + p.key;
  p.plans = p.dir + "/plans/" + p.key;
  p.logs = p.dir + "/logs/" + p.key;
  return p;
}

// One FP32 run, checked as soon as it ends (a command that does not opt in costs one run, not three): it must
// complete, following its plan.
void check_fp32_run(const ExecutedRun& e) {
  const auto c = check_recording(e);
  using trajectory::RunStatus;
  const RunStatus status = c.file.attributes.status.value_or(RunStatus::Completed);
  if (c.outcome != RecordingOutcome::Judged || status != RunStatus::Completed)
    throw std::runtime_error(
        "the FP32 run '" + e.plan.run + "' did not complete (" +
        (c.outcome == RecordingOutcome::Judged ? "status " + trajectory::to_string(status) : to_string(c.outcome)) +
        "): " + c.message +
        (c.message.empty() ? "the end of its log (" + e.log + "):\n" + log_tail(e.log) : std::string()) +
        "\nHINT: the sweep judges every strategy against the command's own FP32 training: make "
        "it run in FP32 first");
}

// The seed run (plan seed_offset 1) bit-identical to the FP32 run: the offset reached nothing the training draws from
// (the script seeds itself, builds its model and data before the Recorder or callback reseeded, and draws nothing
// after), so the reference's band would rest on the skip run alone. Refused, saying how the seed must reach the plan.
void refuse_seed_run_without_noise(const std::vector<ExecutedRun>& fp32) {
  const auto base = reference::read_external_run(fp32[0].recording);
  const auto seed = reference::read_external_run(fp32[1].recording);
  try {
    reference::check_noise_runs_are_noise({{"seed", seed.trajectory}}, base.trajectory, fp32[1].recording);
  } catch (const std::runtime_error&) {
    throw std::runtime_error(
        "the FP32 run '" + fp32[1].plan.run + "' (plan seed_offset " + std::to_string(fp32[1].plan.seed_offset) +
        ") is bit-identical to '" + fp32[0].plan.run + "' at every step (" + std::to_string(base.trajectory.size()) +
        " steps, " + fp32[1].recording +
        "): the plan's seed never reached the training, so it measured no noise and the reference's allowed "
        "deviations would rest on the skip run alone; no reference is built from it. The script seeds itself and "
        "builds its model and data before the plan's seed is applied, and draws nothing random after. HINT: let "
        "the plan's seed_offset reach the seed your script uses — plain loop (ampcheck.Recorder): create the "
        "Recorder before building the model and the data loader (it reseeds torch, random and numpy with "
        "torch.initial_seed() + seed_offset), or seed with it yourself: `from ampcheck.plan import current_plan; "
        "plan = current_plan(); torch.manual_seed(SEED + (plan.seed_offset if plan else 0))` before building the "
        "model; HF Trainer (AmpcheckCallback): build the model inside the Trainer (TrainingArguments(seed=SEED), "
        "Trainer(model_init=...)) or seed as above before from_pretrained / from_config — the callback offsets "
        "args.seed and args.data_seed, which change the data order only where the data is shuffled; Lightning "
        "(AmpcheckLightningCallback): seed_everything(SEED + (plan.seed_offset if plan else 0)) before building "
        "the LightningModule and its data. Then sweep again (the FP32 runs are trained again: the script changed)");
  }
}

// The reference from the three FP32 runs (each checked by check_fp32_run).
trajectory::TrajectoryFile fp32_reference(const std::vector<ExecutedRun>& fp32, const std::string& path) {
  refuse_seed_run_without_noise(fp32);
  ReferenceInputs in{fp32[0].recording, {"seed:" + fp32[1].recording, "skip:" + fp32[2].recording}, path, true};
  auto ref = build_reference(in);
  trajectory::write_trajectory(path, ref, /*overwrite=*/true);  // the sweep directory's own file
  return ref;
}

// judge_recording, with the sweep's HINT where the run is not the same training as the FP32 runs (judge's HINT speaks
// of building another reference; in a sweep the FP32 runs it reused are the stale ones).
report::ScenarioSummary judge_in_sweep(const ExecutedRun& e, const trajectory::TrajectoryFile& ref,
                                       const std::string& ref_path, const JudgeInputs& j, const std::string& dir,
                                       bool strict) {
  try {
    return judge_recording(e.recording, ref, ref_path, j, dir, strict);
  } catch (const std::exception& ex) {
    std::string what = ex.what();
    if (what.find("not the same training") == std::string::npos &&
        what.find("a reference of the same training") == std::string::npos)
      throw;
    what = what.substr(0, what.find(". HINT:"));
    throw std::runtime_error(
        what + ". HINT: the run '" + e.plan.run +
        "' trained another model, data or length than the sweep's FP32 runs — reused from an earlier sweep of this "
        "command into this --out, before something it reads changed: pass --force to train every run again, or "
        "name another --out");
  }
}

// Why a pure low-precision strategy fails when its updates are lost (the fix is not a module).
bool lost_updates(const SweepRow& r) {
  return !fix_without_modules(r.strategy).empty() &&
         (verdict::is(r.judged.verdict, verdict::Kind::Stalls) || r.judged.deciding_signal == "update_norm");
}

SweepRow judge_strategy(const ExecutedRun& e, const trajectory::TrajectoryFile& ref, const std::string& ref_path,
                        const SweepOptions& o, const std::string& dir, double fp32_ms) {
  SweepRow row;
  row.strategy = e.plan.strategy;
  row.speedup = NAN;
  const RecordingCheck c = check_recording(e);
  row.outcome = c.outcome;
  if (c.outcome != RecordingOutcome::Judged && c.outcome != RecordingOutcome::Partial) {
    row.judged.name = e.plan.strategy;
    row.judged.strategy = e.plan.strategy;
    // a strategy the framework cannot apply here is not a failure: its row says "refused" in its verdict's place
    row.judged.verdict = c.outcome == RecordingOutcome::Refused ? to_string(c.outcome) : verdict::kNoVerdict;
    row.judged.pass = c.outcome == RecordingOutcome::Refused;
    row.judged.message = c.message;
    return row;
  }
  JudgeInputs j{{}, ref_path, verdict::to_string(verdict::Kind::Tracks), e.plan.strategy, {}};
  const std::string stopped = "; stopped at the time limit (" + e.process.describe() + ")";
  try {
    row.judged = judge_in_sweep(e, ref, ref_path, j, dir, o.strict);
  } catch (const std::exception& ex) {
    if (c.outcome != RecordingOutcome::Partial) throw;
    // a partial run judge cannot judge (too few steps): its row says why; the sweep goes on
    row.judged.name = row.judged.strategy = e.plan.strategy;
    row.judged.verdict = verdict::kNoVerdict;
    row.judged.pass = false;
    row.judged.message = std::string("not judged: ") + ex.what() + stopped;
    return row;
  }
  row.judged.name = e.plan.strategy;
  // (the first non-finite module, where the recording names one, is in judge's message: judge_run)
  if (c.outcome == RecordingOutcome::Partial) row.judged.message += stopped;
  if (lost_updates(row)) row.judged.message += "; lost updates: " + fix_without_modules(row.strategy);
  row.speedup = fp32_ms / row.judged.median_step_ms;
  return row;
}

// The failing run's probes: short runs with modules kept in FP32, judged against the reference's first steps.
void localize_row(SweepRow& row, const std::vector<ModuleInfo>& tree, const trajectory::TrajectoryFile& ref,
                  const std::string& ref_path, const SweepPaths& paths, const SweepOptions& o, std::ostream& log,
                  int& trainings) {
  // a probe as long as needed to show the failure (localize.h probe_length)
  // a failure within the probes' own noise is searched with the stricter reading (localize.h probe_outcome)
  if (const std::string marginal = marginal_failure(row.judged); !marginal.empty())
    log << row.strategy << ": " << marginal << "\n";
  const int64_t steps = probe_length(ref.trajectory.size(), row.judged.first_divergence_step, o.probe_steps);
  const auto cut = first_steps(ref, steps);
  int n = 0;
  log << "localizing " << row.strategy << " (probes of " << steps << " steps)\n";
  const Probe probe = [&](const std::vector<std::string>& keep) {
    PlannedRun p{"probe-" + row.strategy + "-" + std::to_string(++n), row.strategy, "", 0, keep, steps};
    const ExecutedRun e = execute_run(p, paths, o, log);
    trainings += !e.reused;
    ProbeOutcome out;
    const RecordingCheck c = check_recording(e);
    if (c.outcome != RecordingOutcome::Judged) {
      out.verdict = to_string(c.outcome);
      out.message = c.message;
      return out;
    }
    JudgeInputs j{{}, ref_path, verdict::to_string(verdict::Kind::Tracks), row.strategy, {}};
    const auto judged = judge_in_sweep(e, cut, ref_path, j, paths.runs, o.strict);
    std::vector<int64_t> skipped_at;  // the strategy's own warm-up skips are discounted (localize.h probe_outcome)
    for (size_t i = 0; i < c.file.trajectory.rows.size(); ++i)
      if (c.file.trajectory.rows[i][trajectory::kSkipped] > 0.5) skipped_at.push_back(static_cast<int64_t>(i));
    out = probe_outcome(judged, skipped_at, &row.judged);
    log << "    " << (out.tracks ? "fixes it" : "not fixed") << ": " << out.explanation << "\n";
    return out;
  };
  // the module tree, the first non-finite module first (localize.h localize_tree)
  row.localization = localize_tree(tree, probe, first_nonfinite_module(row.judged.message));
  row.localized = true;
  if (!row.localization.found && !fix_without_modules(row.strategy).empty())
    row.localization.message += "; " + fix_without_modules(row.strategy);
  if (row.localization.found) row.localization.message += "; " + fix_in_script(row.localization, row.judged);
  row.judged.message += "; localized: " + row.localization.message;
}

std::vector<ModuleInfo> module_tree(const trajectory::TrajectoryFile& f) {
  std::vector<ModuleInfo> tree;
  const std::string text = trajectory::text_or(f.attributes.modules);
  if (text.empty()) return tree;
  try {
    for (const auto& m : nlohmann::json::parse(text))
      tree.push_back({m.at(0).get<std::string>(), m.at(1).get<int64_t>()});
  } catch (const std::exception& e) {
    throw std::runtime_error("attribute 'modules' of the FP32 recording: expected a JSON list of [name, parameters], " +
                             std::string(e.what()));
  }
  return tree;
}

// median, spread, rank_speeds, recommend, write_sweep_reports: sweep_answer.cpp
using namespace sweep_answer;

// The device the sweep's strategies are for, and those strategies, checked before anything is written.
std::vector<std::string> resolve_strategies(const SweepOptions& o, std::string& device) {
  device = o.device == "auto" ? (at::hasCUDA() ? "cuda" : "cpu") : o.device;
  if (device != "cpu" && device != "cuda") throw std::invalid_argument("--device: expected auto, cpu or cuda");
  if (device == "cuda" && !at::hasCUDA())
    throw std::invalid_argument(
        "--device cuda: no CUDA device is visible to ampcheck here, so the runs would train on the CPU while "
        "the sweep offered GPU strategies. HINT: run the sweep on a machine with a GPU (check CUDA_VISIBLE_DEVICES "
        "and `ampcheck doctor`), or pass --device cpu");
  for (size_t i = 0; i < o.strategies.size(); ++i) {
    if (o.strategies[i].empty())
      throw std::invalid_argument(
          "--strategies: an empty name in the list. HINT: leave --strategies out for every "
          "strategy the device supports, or name them, e.g. --strategies bf16-autocast,pure-bf16");
    for (size_t j = 0; j < i; ++j)
      if (o.strategies[j] == o.strategies[i])
        throw std::invalid_argument("--strategies: '" + o.strategies[i] +
                                    "' is named twice (each strategy runs once). HINT: name each strategy once");
  }
  return o.strategies.empty() ? sweep_strategies(device) : o.strategies;
}

// The sweep directory's folders made; the files it writes at the top (renamed into place, so a link there would be
// replaced, not followed): a link is refused all the same, before any training.
void prepare_directory(const SweepPaths& paths, const std::vector<std::string>& strategies) {
  for (const auto& d : {paths.runs, paths.plans, paths.logs}) io::make_dirs_below(paths.dir, d, "the sweep directory");
  std::vector<std::string> top = {"reference.h5", "summary.json", "summary.md",
                                  "junit.xml",    "report.html",  "sweep.json"};
  for (const auto& s : strategies) top.push_back(s + ".h5");
  for (const auto& name : top) io::refuse_links_below(paths.dir, paths.dir + "/" + name, "the sweep directory");
}

// FP32's row: its steady-state step time the median of its three runs' (each the median after warm-up) — their
// spread is the machine's timing noise (the same training three times) — and the recording's provenance.
void fill_fp32(SweepResult& r, const std::vector<ExecutedRun>& fp32, const trajectory::TrajectoryFile& fp32_file) {
  fill_recorded_measurements(r.fp32, fp32_file);
  r.fp32_runs_ms.push_back(r.fp32.median_step_ms);
  const report::ScenarioSummary* middle = &r.fp32;  // the run whose ms/step is the median of the three
  std::vector<report::ScenarioSummary> others(fp32.size());
  for (size_t i = 1; i < fp32.size(); ++i) {
    fill_recorded_measurements(others[i], reference::read_external_run(fp32[i].recording));
    r.fp32_runs_ms.push_back(others[i].median_step_ms);
  }
  r.timing_spread = spread(r.fp32_runs_ms);
  if (const double center = median(r.fp32_runs_ms); std::isfinite(center) && center > 0) {
    for (size_t i = 1; i < fp32.size(); ++i)
      if (others[i].median_step_ms == center) middle = &others[i];
    r.fp32.tokens_per_s *= r.fp32.median_step_ms / center;
    r.fp32.samples_per_s *= r.fp32.median_step_ms / center;
    r.fp32.median_step_ms = center;
    r.fp32.p10_step_ms = middle->p10_step_ms;  // (its own quantiles: the p10-p90 spread around that median)
    r.fp32.p90_step_ms = middle->p90_step_ms;
  }
  using trajectory::text_or;
  const trajectory::RunAttributes& fp32_attributes = fp32_file.attributes;
  r.fp32.device_class = text_or(fp32_attributes.device_class, r.device);
  r.summary.libtorch_version = text_or(fp32_attributes.torch_version, "-");
  r.summary.cuda_version = text_or(fp32_attributes.cuda_version);
  r.summary.device_name = text_or(fp32_attributes.device_name, r.fp32.device_class);
}

}  // namespace

SweepResult sweep(const SweepOptions& o, std::ostream& log) {
  if (o.command.empty())
    throw std::invalid_argument("sweep: no training command. HINT: ampcheck sweep [options] -- python train.py ...");
  const auto t0 = std::chrono::steady_clock::now();
  SweepResult r;
  const std::vector<std::string> strategies = resolve_strategies(o, r.device);
  std::string covered;
  const SweepPaths paths = prepare_paths(o, covered);
  const SweepLock lock(paths.dir);  // one sweep per directory at a time
  prepare_directory(paths, strategies);
  r.dir = paths.dir;
  r.key = paths.key;
  log << "sweep " << r.key << " (" << r.device << "): 3 FP32 runs + " << strategies.size() << " strategies\n";
  auto run = [&](const PlannedRun& p) {
    ExecutedRun e = execute_run(p, paths, o, log);
    (e.reused ? r.reused : r.trainings) += 1;
    return e;
  };
  // 1. FP32 three times (the reference, a seed run, a skip run: FP32's own spread) and the reference made of them
  std::vector<ExecutedRun> fp32;
  for (const PlannedRun& p :
       {PlannedRun{"fp32", "fp32", "", 0, {}, o.steps}, PlannedRun{"fp32-seed", "fp32", "seed", 1, {}, o.steps},
        PlannedRun{"fp32-skip", "fp32", "skip", 0, {}, o.steps}}) {
    fp32.push_back(run(p));
    check_fp32_run(fp32.back());
  }
  const std::string ref_path = r.dir + "/reference.h5";
  const auto ref = fp32_reference(fp32, ref_path);
  const auto fp32_file = reference::read_external_run(fp32[0].recording);
  fill_fp32(r, fp32, fp32_file);
  // 2. each strategy once, judged; 3. their speeds ranked (interleaved timing re-runs); 4. the failing ones localized
  for (const auto& s : strategies) {
    const ExecutedRun e = run({s, s, "", 0, {}, o.steps});
    r.rows.push_back(judge_strategy(e, ref, ref_path, o, r.dir, r.fp32.median_step_ms));
  }
  r.timing_rounds = o.timing_rounds;
  rank_speeds(r, paths, o, ref.trajectory.size(), log);
  if (o.localize) {
    const auto tree = module_tree(fp32_file);
    for (auto& row : r.rows)
      if ((row.outcome == RecordingOutcome::Judged || row.outcome == RecordingOutcome::Partial) &&
          !verdict::is(row.judged.verdict, verdict::Kind::Tracks) &&
          !verdict::is(row.judged.verdict, verdict::Kind::Error))
        localize_row(row, tree, ref, ref_path, paths, o, log, r.trainings);
  }
  if (r.reused > 0)  // what reusing a run assumes, said every time
    log << "reused " << r.reused << " run(s) of an earlier sweep (--force trains them again). The cache key covers "
        << "the command's arguments, its working directory, --steps, the contents of the files its arguments name ("
        << (covered.empty() ? std::string("none") : covered) << ") and " << keyed_environment().size()
        << " environment variables (docs/USING.md); it assumes nothing else the command reads — the modules it "
           "imports, data directories, files it opens by a name not on its command line — changed since\n";
  // 5. the answer: the recommendation, the reports
  r.recommendation = recommend(r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string command;
  for (const auto& a : o.command) command += (command.empty() ? "" : " ") + a;
  write_sweep_reports(r, command);
  return r;
}

}  // namespace ampcheck::usecases
