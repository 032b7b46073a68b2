// One rank's own work in `validate --fleet` (fleet_rank.h).
#include "usecases/fleet_rank.h"
#include "usecases/judge_engine_run.h"
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"

#include "engine/device.h"
#include "io/files.h"
#include "run/scenario_run.h"
#include "validate/golden.h"
#include "verdict/kind.h"

#include <stdexcept>

namespace ampcheck::usecases {

namespace {

// validate's statistical verdict on the run against the scenario's FP32 references, where it has some, into `r`.
void judge_statistically(const FleetScenario& s, const run::ScenarioResult& result, const at::Device& device,
                         validate::FleetRun& r) {
  if (s.reference_class.empty()) return;
  const Judged j = judge_engine_run(result, s.sc.run.strategy, device, {s.reference.file.trajectory, s.reference.noise},
                                    scenario::expectation(s.sc.expect), s.sc.tolerance, /*strict=*/false);
  r.reference_class = s.reference_class;
  r.statistical_verdict = j.verdict.verdict;
  r.statistical_pass = j.decision.pass;
  r.statistical_message = j.verdict.message;
}

}  // namespace

// This rank's plants of repetition `rep`.
std::vector<validate::Plant> plants_for(const std::vector<validate::RankPlant>& all, int64_t rank, int64_t rep) {
  std::vector<validate::Plant> out;
  for (const auto& p : all)
    if (p.rank == rank && (p.repetition == 0 || p.repetition == rep)) out.push_back(p.plant);
  return out;
}

// Everything that is bad input, checked on this rank before anything trains; throws naming it.
std::vector<FleetScenario> prepare_rank(const RunOptions& opts, const ValidateOptions& v,
                                        const std::vector<validate::RankPlant>& plants, const validate::Fingerprint& fp,
                                        const std::string& device_class, int64_t rank, int64_t world) {
  if (v.record) throw std::invalid_argument("--fleet with --record: record goldens on one known-good machine");
  if (!v.plants.empty())
    throw std::invalid_argument("--fleet with --plant: plant on one rank with --plant-rank R:<plant>");
  if (v.replays < 2) throw std::invalid_argument("--replays: at least 2 (a fault that varies shows between replays)");
  for (const auto& p : plants)
    if (p.rank >= world)
      throw std::invalid_argument("--plant-rank '" + std::to_string(p.rank) + ":" + p.plant.text + "': rank " +
                                  std::to_string(p.rank) + " of a job of " + std::to_string(world) +
                                  " ranks (expected 0.." + std::to_string(world - 1) + ")");
  const auto files = resolve_scenario_files(opts);
  refuse_duplicate_scenario_names(files, opts);
  const std::string root = reference_root(opts);
  const std::string cls = validate::golden_class(fp);
  std::vector<FleetScenario> out;
  for (const auto& file : files) {
    FleetScenario s;
    s.sc = load_for_run(file, opts);
    if (opts.steps > 0) s.sc.run.loop.steps = opts.steps;
    s.sc.run.loop.digests = true;
    s.sc.run.loop.log_every = 1;
    if (s.sc.run.distributed.world_size > 1)
      throw std::invalid_argument(file +
                                  ": a data-parallel scenario (distributed:); --fleet runs one process per "
                                  "rank, each the whole scenario");
    const auto shapes = validate::parameter_shapes(s.sc.run);
    for (const auto& p : plants)
      if (p.rank == rank) validate::check_plant(p.plant, shapes, s.sc.run.loop.steps);
    const std::string path = validate::golden_path(root, cls, s.sc.run.name);
    if (!io::file_exists(path)) {
      s.golden_skip = "no golden of class " + cls + ": the peers only";
    } else {
      s.golden = validate::read_golden(path, s.sc.run);  // bad input (exit 2) if corrupt, foreign or stale
      std::vector<validate::StackDifference> bit;
      for (const auto& d : validate::stack_differences(trajectory::attribute_map(s.golden.attributes), fp))
        if (d.changes_bits) bit.push_back(d);
      if (bit.empty()) s.golden_path = path;
      else
        s.golden_skip = "the " + cls + " golden's stack differs (" + validate::describe(bit) + "): the peers only";
    }
    // a stale or corrupt FP32 reference is bad input (exit 2), as for validate
    s.reference_class = fp32_reference_class(root, device_class, s.sc.run);
    if (!s.reference_class.empty())
      s.reference = reference::load_reference(root, s.reference_class, s.sc.run, opts.suite);
    out.push_back(std::move(s));
  }
  if (rank == 0) check_run_directory_replaceable(opts);
  return out;
}

// One repetition's runs on this rank; the trajectories kept for the outliers' comparison and the broadcast.
validate::FleetRuns run_repetition(const std::vector<FleetScenario>& scenarios,
                                   const std::vector<validate::Plant>& plants, const at::Device& device, int64_t rank,
                                   std::vector<trajectory::Trajectory>& trajectories) {
  validate::FleetRuns out;
  out.rank = rank;
  trajectories.assign(scenarios.size(), {});
  for (size_t i = 0; i < scenarios.size(); ++i) {
    const auto& s = scenarios[i];
    validate::FleetRun r;
    r.scenario = s.sc.run.name;
    r.nonfinite_expected = verdict::is(scenario::expectation(s.sc.expect).verdict, verdict::Kind::NonFinite);
    try {
      scenario::Scenario planted = s.sc;
      planted.run = validate::planted(s.sc.run, plants, /*replay=*/false);
      const auto result = run::train_scenario(planted, device.str(), 0, nullptr);
      r.status = result.outcome.status;
      r.error = result.outcome.error;
      trajectories[i] = result.trajectory;
      r.trajectory_hash = validate::trajectory_hash(result.trajectory);
      r.steps = result.trajectory.size();
      for (const auto& row : result.trajectory.rows) r.losses.push_back(row[trajectory::kLoss]);
      if (!s.golden_path.empty()) {
        const auto cmp = validate::compare_bitwise(result.trajectory, s.golden.trajectory);
        r.golden = s.golden_path;
        r.golden_result = cmp.identical ? validate::GoldenResult::Identical : validate::GoldenResult::Differs;
        r.golden_message = cmp.message;
      } else {
        r.golden_message = s.golden_skip;
      }
      judge_statistically(s, result, device, r);
    } catch (const std::exception& e) {
      r.status = trajectory::RunStatus::Error;
      r.error = e.what();
    }
    out.runs.push_back(std::move(r));
  }
  return out;
}

}  // namespace ampcheck::usecases
