// reference: a reference for runs of other training loops, built from the user's own FP32 run plus a few more FP32
// runs (another seed, another data order, the first optimizer step not taken, ulp-nudged weights) that give the noise;
// `judge` (judge_runs.cpp) compares external runs (docs/TRAJECTORY_FORMAT.md) with it signal by signal, exactly as
// `check` compares ampcheck's own runs.
#include "usecases/result_rows.h"
#include "usecases/run_directory.h"
#include "usecases/recordings.h"
#include "usecases/usecases.h"

#include "reference/external_run.h"
#include "reference/reference_store.h"
#include "trajectory/run_status.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace ampcheck::usecases {

namespace {

// What a spread run is: `seed`, `order`, `skip` (the first optimizer step not taken) or `ulp`, from a KIND: prefix on
// the command line or the file's `perturbation` attribute (the recorder's perturbation=...); both given must agree.
struct SpreadRun {
  std::string kind, path;
  trajectory::TrajectoryFile file;  // read once, when its kind is decided
};

SpreadRun spread_kind(const std::string& arg) {
  static const std::vector<std::string> kinds = {"seed", "order", "skip", "ulp"};
  SpreadRun r{"", arg, {}};
  for (const auto& k : kinds)
    if (arg.rfind(k + ":", 0) == 0) r = {k, arg.substr(k.size() + 1), {}};
  if (r.path.empty())
    throw std::runtime_error("--spread " + arg + ": expected [KIND:]FILE, with a file after the label");
  return r;
}

// One spread run read, its kind decided from the command line's label and the file's attribute.
SpreadRun read_spread_run(const std::string& arg) {
  SpreadRun sr = spread_kind(arg);
  sr.file = reference::read_external_run(sr.path);
  const std::string recorded = trajectory::text_or(sr.file.attributes.perturbation);
  if (!recorded.empty() && recorded != "seed" && recorded != "order" && recorded != "skip" && recorded != "ulp")
    throw std::runtime_error(sr.path + ": attribute 'perturbation' is '" + recorded +
                             "', expected seed, order, skip or ulp for a spread run");
  if (!sr.kind.empty() && !recorded.empty() && sr.kind != recorded)
    throw std::runtime_error(sr.path + ": labelled " + sr.kind + ": on the command line, but its attribute " +
                             "'perturbation' says " + recorded);
  if (sr.kind.empty()) sr.kind = recorded;
  if (sr.kind.empty())
    throw std::runtime_error(sr.path +
                             ": what kind of spread run is this? It has no 'perturbation' attribute. "
                             "HINT: label it on the command line — --spread seed:" +
                             sr.path + " (another init seed), order:" + sr.path + " (another data order), skip:" +
                             sr.path + " (the first optimizer step not taken) or ulp:" + sr.path +
                             " (weights nudged by an ulp) — or record it with Recorder(..., perturbation=\"seed\")");
  return sr;
}

// A run of a reference: as long as the FP32 run, finite loss at every step.
void check_reference_run(const trajectory::TrajectoryFile& f, const std::string& path, int64_t steps) {
  if (f.trajectory.size() != steps)
    throw std::runtime_error(path + ": " + std::to_string(f.trajectory.size()) + " steps, the FP32 run has " +
                             std::to_string(steps) + ": a reference's runs must train the same number of steps");
  for (int64_t s = 0; s < f.trajectory.size(); ++s)
    if (!std::isfinite(f.trajectory.rows[s][trajectory::kLoss]))
      throw std::runtime_error(path + ": loss at step " + std::to_string(s) +
                               " is not finite: an FP32 reference run must complete");
}

}  // namespace

trajectory::TrajectoryFile build_reference(const ReferenceInputs& in) {
  if (in.spread.empty())
    throw std::runtime_error(
        "--spread: at least one more FP32 run is needed (another seed or another data order): "
        "the allowed deviations are measured on how far such runs lie from the reference");
  // 1. what each spread run is, before anything is read in full: a reference whose spread is only ±1-ulp nudges
  //    measures how fast rounding grows (chaos), not how far an equally valid training lies — correct mixed
  //    precision then fails (docs/TOLERANCE.md)
  std::vector<SpreadRun> spread_runs;
  bool has_valid_alternative = false;
  for (const auto& arg : in.spread) {
    spread_runs.push_back(read_spread_run(arg));
    has_valid_alternative |= spread_runs.back().kind == "seed" || spread_runs.back().kind == "order";
  }
  bool only_ulp = true;
  std::string kinds_given;
  for (const auto& s : spread_runs) {
    only_ulp &= s.kind == "ulp";
    kinds_given += (kinds_given.empty() ? "" : ", ") + s.kind + ":" + s.path;
  }
  if (!has_valid_alternative)
    throw std::runtime_error(
        std::string(only_ulp ? "--spread: every spread run is an ulp nudge"
                             : "--spread: no seed or order run among the spread runs (" + kinds_given + ")") +
        "; a reference needs at least one seed or order "
        "run. HINT: ±1-ulp runs and a skipped first step measure how fast a small perturbation grows in FP32, not how "
        "far an equally valid training lies, so correct mixed precision would fail against them. Train the FP32 "
        "setup once more with another init seed (torch.manual_seed before building the model) or "
        "another data order (the sampler's / data loader's seed; HF TrainingArguments(data_seed=...)) "
        "and pass it as --spread seed:FILE or order:FILE");
  // 2. the FP32 run, then each spread run checked against it and labelled
  trajectory::TrajectoryFile ref = reference::read_external_run(in.fp32_run);
  check_reference_run(ref, in.fp32_run, ref.trajectory.size());
  std::map<std::string, int> per_kind;
  std::string sources, labels;
  for (const auto& sr : spread_runs) {
    reference::check_same_training(sr.file, sr.path, ref, in.fp32_run);
    check_reference_run(sr.file, sr.path, ref.trajectory.size());
    // a seed or order run bit-identical to the FP32 run measured no noise: refused here, not only when judged
    reference::check_noise_runs_are_noise({{sr.kind, sr.file.trajectory}}, ref.trajectory, sr.path);
    // labels: the kind, numbered from the second run of a kind on (seed, seed-2, ...); ulp runs start with "ulp"
    const int k = ++per_kind[sr.kind];
    const std::string label = k == 1 ? sr.kind : sr.kind + "-" + std::to_string(k);
    ref.noise_runs.push_back({label, sr.file.trajectory});
    sources += (sources.empty() ? "" : "\n") + label + "=" + sr.path;
    labels += (labels.empty() ? "" : ",") + label;
  }
  ref.attributes.noise_sources = sources;
  ref.series["loss_spread"] = reference::loss_spread(ref.trajectory, ref.noise_runs);
  ref.attributes.kind = "external-fp32-reference";
  ref.attributes.reference_of = in.fp32_run;
  ref.attributes.status = trajectory::RunStatus::Completed;
  ref.attributes.noise_runs = labels;
  return ref;
}

trajectory::TrajectoryFile first_steps(const trajectory::TrajectoryFile& ref, int64_t steps) {
  trajectory::TrajectoryFile cut = ref;
  const auto n = static_cast<size_t>(std::max<int64_t>(0, steps));
  if (cut.trajectory.rows.size() > n) cut.trajectory.rows.resize(n);
  for (auto& nr : cut.noise_runs)
    if (nr.trajectory.rows.size() > n) nr.trajectory.rows.resize(n);
  for (auto& [name, series] : cut.series)
    if (series.size() > n) series.resize(n);
  return cut;
}

ReferenceResult make_reference(const ReferenceInputs& in) {
  refuse_unless_replaceable_file(in.out, in.force, kReferenceFile);  // before anything is read: a user's file stays
  const trajectory::TrajectoryFile ref = build_reference(in);
  trajectory::write_trajectory(in.out, ref, in.force);
  ReferenceResult r{in.out, ref.trajectory.size(), {}};
  for (const auto& nr : ref.noise_runs) r.noise_labels.push_back(nr.label);
  return r;
}

}  // namespace ampcheck::usecases
