// validate --fleet: this process is one rank of a torchrun / srun job. Every rank runs the validation suite with the
// same seeds on its own device (cuda:LOCAL_RANK, or the CPU); the ranks exchange what they computed through the job's
// process group (distributed/rank_exchange.h: Gloo on CPUs, NCCL on GPUs) and vote (validate/fleet.h):
//   0. identities: host, device, GPU UUID / PCI bus, the stack fingerprint, the options that change results and each
//      scenario's name and configuration hash — and each rank's bad input: if any rank has some (a plant that cannot
//      act, a corrupt golden, --out that may not be replaced on rank 0), or the ranks' options or scenarios differ
//      (another checkout on one node), every rank exits 2 naming the ranks and the field, before anything trains;
//   per repetition (--repeat / --duration):
//   1. each rank trains the suite (its --plant-rank plants of this repetition applied) and compares each run with its
//      class's golden where one exists and its stack matches, and judges it statistically against its FP32 references
//      where the reference root holds them (validate's statistical mode); the trajectory hashes are all-gathered;
//   2. each group (one fingerprint) votes per scenario: the majority's hash (more than half of the group's ranks);
//   3. for each vote with outliers, the majority's trajectory is broadcast from its representative; each outlier
//      finds the first differing step, column and tensor and replays that step on its own device (transient /
//      persistent); the findings are all-gathered.
// Rank 0 writes the fleet report (fleet_report.h) into --out, staged and published whole. Every rank computes the
// same verdict from the same records, so each exits with the same code. Throughout, a distributed::RankWatch beats a
// heartbeat through the job's store: a rank that dies or stops answering is named within --fleet-lost-after seconds
// (or when the launcher stops the job), and rank 0 publishes the repetitions every rank finished.
#include "usecases/fleet_rank.h"
#include "usecases/fleet_report.h"
#include "usecases/run_directory.h"
#include "usecases/scenario_files.h"
#include "usecases/usecases.h"

#include "distributed/process_group.h"
#include "distributed/rank_exchange.h"
#include "distributed/rank_watch.h"
#include "engine/device.h"
#include "io/files.h"
#include "io/record_json.h"
#include "io/text.h"
#include "run/provenance.h"
#include "trajectory/trajectory_file.h"
#include "validate/fleet.h"
#include "validate/golden.h"
#include "validate/validate.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <set>

namespace ampcheck::usecases {

namespace {

using validate::FleetFinding;
using validate::FleetRankIdentity;
using validate::FleetRun;
using validate::FleetRuns;

template <class T>
std::string to_message(const T& record) {
  nlohmann::json j = io::record_to_json(record);
  io::make_json_strings_printable(j);
  return j.dump();
}
template <class T>
T from_message(const std::string& text, int64_t rank, const char* what) {
  T record;
  try {
    io::record_from_json(nlohmann::json::parse(text), record);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(rank) + "'s " + what + " message: " + e.what() +
                             ". HINT: every rank must run the same ampcheck");
  }
  return record;
}
template <class T>
std::vector<T> gather(distributed::RankExchange& x, const T& mine, const char* what, int64_t* bytes = nullptr) {
  const std::string text = to_message(mine);
  if (bytes) *bytes = static_cast<int64_t>(text.size());
  x.barrier();  // every rank is here: the exchange's time below is the transfer, not the wait for the slowest
  std::vector<T> out;
  const auto all = x.all_gather(text);
  for (size_t k = 0; k < all.size(); ++k) out.push_back(from_message<T>(all[k], static_cast<int64_t>(k), what));
  return out;
}

std::string hostname() {
  char h[256] = {0};
  return ::gethostname(h, sizeof h - 1) == 0 ? std::string(h) : std::string("(unknown host)");
}

// This rank's device: --device (default auto: the GPU if there is one, else the CPU); a GPU is the local rank's.
at::Device fleet_device(const RunOptions& opts, int64_t local_rank) {
  std::string spec = opts.device.empty() ? "auto" : opts.device;
  if (spec == "auto") spec = at::hasCUDA() ? "cuda" : "cpu";
  // cuda:LOCAL_RANK; a task that sees one GPU (a launcher that binds one per task) takes that one
  if (spec.rfind("cuda", 0) == 0) spec = "cuda:" + std::to_string(engine::cuda_device_count() == 1 ? 0 : local_rank);
  return engine::resolve_device(spec);
}

// The options every rank must share: each changes what trains, how often, or what is compared.
std::vector<validate::FleetKeyValue> fleet_options_of(const RunOptions& opts, const ValidateOptions& v) {
  std::string plants;
  for (const auto& p : v.plant_ranks) plants += (plants.empty() ? "" : " ") + p;
  return {{"--steps", opts.steps > 0 ? std::to_string(opts.steps) : "(each scenario's)"},
          {"--repeat", v.repeat > 0 ? std::to_string(v.repeat) : "(once)"},
          {"--duration", v.duration_s > 0 ? io::number_text(v.duration_s, 6) : "(none)"},
          {"--replays", std::to_string(v.replays)},
          {"--plant-rank", plants.empty() ? "(none)" : plants},
          {"--fleet-timeout", io::number_text(v.fleet_timeout_s, 6)},
          {"--fleet-lost-after", io::number_text(v.fleet_lost_after_s, 6)}};
}

// --plant-rank R/K with K past the repetitions the fleet runs never acts: refused with the others' bad input.
void refuse_unreachable_plants(const ValidateOptions& v, const std::vector<validate::RankPlant>& plants) {
  const int64_t reps = v.repeat > 0 ? v.repeat : (v.duration_s > 0 ? 0 : 1);  // 0: --duration decides, unbounded
  for (size_t i = 0; i < plants.size(); ++i)
    if (reps > 0 && plants[i].repetition > reps)
      throw std::invalid_argument("--plant-rank '" + v.plant_ranks[i] + "': repetition " +
                                  std::to_string(plants[i].repetition) + " of a fleet of " + std::to_string(reps) +
                                  " repetition(s) (" +
                                  (v.repeat > 0 ? "--repeat " + std::to_string(v.repeat) : "no --repeat: once") +
                                  "): it would never act. HINT: --repeat " + std::to_string(plants[i].repetition) +
                                  " or more, or a repetition from 1 to " + std::to_string(reps));
}

// Step 3: the majority's trajectories broadcast to the outliers; each outlier's findings (compared, replayed).
std::vector<FleetFinding> settle(distributed::RankExchange& x, const std::vector<validate::FleetVote>& votes,
                                 const std::vector<FleetScenario>& scenarios,
                                 const std::vector<trajectory::Trajectory>& mine,
                                 const std::vector<validate::Plant>& plants, const at::Device& device,
                                 const ValidateOptions& v, const std::string& scratch, int64_t rep) {
  std::vector<FleetFinding> found;
  for (const validate::FleetVote* vote : validate::votes_to_settle(votes)) {
    size_t s = 0;
    while (s < scenarios.size() && scenarios[s].sc.run.name != vote->scenario) ++s;
    const bool have = s < scenarios.size();  // always, once the ranks' scenarios were checked alike
    // goldens outrank the majority: an outlier of a group that compared goldens compares with its own copy of the
    // golden (nothing broadcast); otherwise with the majority's trajectory, broadcast from its representative
    const bool golden = vote->against_golden;
    const bool representative = x.rank() == vote->majority_rank;
    std::string majority_bytes;
    if (!golden)
      majority_bytes = x.broadcast(representative && have ? validate::encode_trajectory(mine[s]) : std::string(),
                                   vote->majority_rank);
    if (std::find(vote->outliers.begin(), vote->outliers.end(), x.rank()) == vote->outliers.end()) continue;
    FleetFinding f;
    f.rank = x.rank();
    f.repetition = rep;
    f.majority_rank = golden ? -1 : vote->majority_rank;
    f.scenario = vote->scenario;
    if (!have || (golden && scenarios[s].golden_path.empty())) {
      f.against = golden ? "the golden" : "the majority (rank " + std::to_string(vote->majority_rank) + ")";
      f.difference =
          !have ? "this rank has no scenario of that name"
                : "the group's other ranks compared a golden this rank has not (" + scenarios[s].golden_skip + ")";
      found.push_back(std::move(f));
      continue;
    }
    f.against = golden ? "the " + scenarios[s].golden_path + " golden"
                       : "the majority (rank " + std::to_string(vote->majority_rank) + ")";
    const trajectory::Trajectory majority =
        golden ? scenarios[s].golden.trajectory : validate::decode_trajectory(majority_bytes);
    const auto cmp = validate::compare_bitwise(mine[s], majority);
    f.first_step = cmp.step;
    f.column = cmp.column;
    f.tensor = cmp.tensor;
    f.difference = cmp.message;
    if (mine[s].size() > cmp.step && !mine[s].digests.empty()) {
      try {
        io::make_dirs(scratch);
        const auto rp = validate::replay_step(validate::planted(scenarios[s].sc.run, plants, /*replay=*/true), device,
                                              cmp.step, mine[s], majority, static_cast<int>(v.replays), scratch,
                                              golden ? "golden" : "majority");
        f.replay = rp.kind;
        f.replay_message = rp.message;
      } catch (const std::exception& e) {
        f.replay_message = std::string("the replay failed: ") + e.what();
      }
    } else {
      f.replay_message = "not replayed: the run ended before the first difference";
    }
    found.push_back(std::move(f));
  }
  return found;
}

// What the watch needs to publish the repetitions every rank finished, shared with the training thread.
struct FleetProgress {
  std::mutex mutex;
  std::vector<FleetRankIdentity> ids;
  std::vector<validate::FleetGroup> groups;
  std::vector<std::vector<validate::FleetVote>> votes;
  std::vector<std::vector<FleetRuns>> runs;
  std::vector<std::vector<FleetFinding>> findings;
  std::unique_ptr<RunDirectory> out;  // rank 0 only: published whole (not written in place as a job's ranks would)
  std::string scratch;
};

// The fleet's report as the four files in the staging directory, then published.
void publish_report(RunDirectory& out, const FleetSummary& s) {
  const std::string dir = out.staging();
  io::write_file_atomically(dir + "/summary.json", fleet_summary_json(s));
  io::write_file_atomically(dir + "/summary.md", fleet_summary_md(s));
  io::write_file_atomically(dir + "/junit.xml", fleet_junit_xml(s));
  io::write_file_atomically(dir + "/report.html", fleet_report_html(s));
  out.publish();
}

// The watch's stop, on its thread: rank 0 publishes what every rank finished, with the lost ranks named; every rank
// says why it ends. The process exits after (RankWatch).
void on_fleet_stop(FleetProgress& p, int64_t rank, const std::vector<distributed::LostRank>& lost,
                   const std::string& why) {
  std::cerr << "rank " << rank << ": validate --fleet stopped: " << why << "\n" << std::flush;
  std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.scratch.empty() && io::file_exists(p.scratch)) {
    try {
      io::remove_tree(p.scratch);
    } catch (...) {
    }
  }
  if (!p.out || p.ids.empty()) return;  // not rank 0, or before the identities: nothing to report
  FleetSummary s = summarize_fleet(p.ids, p.groups, p.votes, p.runs, p.findings);
  std::vector<std::pair<int64_t, std::string>> named;
  for (auto l : lost) {
    if (l.host.empty() && l.rank >= 0 && static_cast<size_t>(l.rank) < p.ids.size())
      l.host = p.ids[static_cast<size_t>(l.rank)].host;
    named.emplace_back(l.rank, distributed::describe(l));
  }
  mark_stopped(s, named, why);
  publish_report(*p.out, s);
  std::cout << s.verdict << "\n";
  for (const auto& r : s.ranks)
    if (!r.pass) std::cout << "rank " << r.rank << ": " << r.message << "\n";
  std::cout << "reports: " << p.out->final_dir() << "/summary.md\n" << std::flush;
}

// The ranks' options and scenarios compared (an all-gather of the differing scenarios' configuration texts when a
// hash differs, to name the fields); throws std::invalid_argument naming them: every rank exits 2 alike.
void refuse_different_inputs(distributed::RankExchange& x, const std::vector<FleetRankIdentity>& ids,
                             const std::vector<FleetScenario>& scenarios) {
  auto lines = validate::fleet_input_differences(ids);
  if (lines.empty()) return;
  const auto apart = validate::scenarios_configured_apart(ids);
  if (!apart.empty()) {  // every rank sees the same ids: every rank takes part in this exchange
    nlohmann::json mine = nlohmann::json::object();
    for (const auto& sc : scenarios)
      if (std::find(apart.begin(), apart.end(), sc.sc.run.name) != apart.end())
        mine[sc.sc.run.name] = validate::golden_config_text(sc.sc.run);
    const auto all = x.all_gather(mine.dump());
    for (const auto& name : apart) {
      std::vector<std::string> texts;
      for (const auto& one : all) {
        const auto j = nlohmann::json::parse(one, nullptr, /*allow_exceptions=*/false);
        texts.push_back(j.is_object() && j.contains(name) && j[name].is_string() ? j[name].get<std::string>() : "");
      }
      for (const auto& l : validate::configuration_differences(name, texts)) lines.push_back(l);
    }
  }
  std::string text;
  for (const auto& l : lines) text += "\n  " + l;
  if (x.rank() != 0)
    throw std::invalid_argument("--fleet: the ranks do not run the same validation; rank 0's message names each");
  throw std::invalid_argument(
      "--fleet: the ranks do not run the same validation (bad input, nothing trained):" + text +
      "\nHINT: every rank must run the same ampcheck checkout with the same scenarios and options (a node with a stale "
      "checkout or another command line); a fleet votes only between identical runs");
}

// An exchange that failed (a peer's connection closed): the watch names who, else the error stands.
template <class F>
auto exchanged(distributed::RankWatch& watch, F&& f) {
  try {
    return f();
  } catch (const std::invalid_argument&) {
    watch.finish();  // bad input, decided alike on every rank: exit 2, whoever exits first
    throw;
  } catch (const std::exception&) {
    watch.wait_for_verdict();
    throw;
  }
}

// Who this rank is: where it runs (host, device, GPU UUID / PCI bus, CPU), its stack's fingerprint and golden class,
// the options that change results. Its plants, scenarios and bad input are added by the caller.
FleetRankIdentity rank_identity(const distributed::RankEnv& env, const at::Device& device,
                                const validate::Fingerprint& fp, const std::string& host,
                                std::vector<validate::FleetKeyValue> options) {
  FleetRankIdentity me;
  me.rank = env.rank;
  me.local_rank = env.local_rank;
  me.world_size = env.world_size;
  me.host = host;
  me.device = device.str();
  me.device_name = engine::device_info(device).name;
  me.cpu_model = engine::device_info(at::Device(at::kCPU)).name;
  if (device.is_cuda()) {
    me.gpu_uuid = engine::cuda_device_uuid(device.index());
    me.pci_bus = engine::cuda_pci_bus_id(device.index());
  }
  me.golden_class = validate::golden_class(fp);
  for (const auto& [k, val] : fp) me.fingerprint.push_back({k, val});
  me.options = std::move(options);
  return me;
}

// This rank in the job, as every repetition takes it.
struct FleetRank {
  const distributed::RankEnv& env;
  at::Device device;
  std::vector<validate::RankPlant> plants;  // every rank's, as --plant-rank gives them
  std::vector<FleetScenario> scenarios;
  std::string scratch;  // a replay's checkpoint: a hidden directory of this rank beside --out
  std::chrono::steady_clock::time_point start;
};

// This rank's plants and scenarios (prepare_rank: everything that is bad input, checked before anything trains) into
// rank, and its identity with them: its plants' text, each scenario's name and configuration hash, else its bad input
// as the identity's error (every rank learns it in the exchange).
FleetRankIdentity prepare_rank_and_identity(FleetRank& rank, const RunOptions& opts, const ValidateOptions& v,
                                            const validate::Fingerprint& fp, const std::string& host) {
  FleetRankIdentity me = rank_identity(rank.env, rank.device, fp, host, fleet_options_of(opts, v));
  try {
    for (const auto& text : v.plant_ranks) rank.plants.push_back(validate::parse_plant_rank(text));
    refuse_unreachable_plants(v, rank.plants);
    for (const auto& p : rank.plants)
      if (p.rank == rank.env.rank) me.plants += (me.plants.empty() ? "" : ", ") + p.plant.text;
    rank.scenarios = prepare_rank(opts, v, rank.plants, fp, engine::device_info(rank.device).device_class,
                                  rank.env.rank, rank.env.world_size);
    for (const auto& sc : rank.scenarios)
      me.scenarios.push_back({sc.sc.run.name, validate::golden_config_hash(sc.sc.run)});
  } catch (const std::exception& e) {
    me.error = e.what();
  }
  return me;
}

// Any rank's bad input (its identity's error): every rank exits 2; rank 0 names every rank's reason, the others point
// at it.
void refuse_bad_input(const std::vector<FleetRankIdentity>& ids, const FleetRankIdentity& me,
                      distributed::RankWatch& watch) {
  std::string bad;
  for (const auto& id : ids)
    if (!id.error.empty())
      bad += (bad.empty() ? "" : "\n") + ("rank " + std::to_string(id.rank) + " (" + id.host + "): " + id.error);
  if (bad.empty()) return;
  watch.finish();
  if (me.rank == 0) throw std::invalid_argument("--fleet: bad input, nothing trained:\n" + bad);
  throw std::invalid_argument("--fleet: bad input on " + std::string(me.error.empty() ? "another rank" : "this rank") +
                              "; rank 0's message names each");
}

// One repetition: this rank trains the suite (its plants of the repetition applied), the runs are exchanged and voted
// on, the outliers compared and replayed, the findings exchanged; all kept in progress. Returns rank 0's seconds
// since its start (it travelled in its findings message: its clock decides --duration for everyone).
double fleet_repetition(int64_t rep, const FleetRank& me, const std::vector<validate::FleetGroup>& groups,
                        const ValidateOptions& v, distributed::RankExchange& x, distributed::RankWatch& watch,
                        FleetProgress& progress, int64_t* runs_bytes, std::ostream& log) {
  const std::string of = " repetition " + std::to_string(rep);
  const auto mine_plants = plants_for(me.plants, me.env.rank, rep);
  std::vector<trajectory::Trajectory> mine;
  watch.set_phase("training" + of);
  FleetRuns my_runs = run_repetition(me.scenarios, mine_plants, me.device, me.env.rank, mine);
  watch.set_phase("exchanging the runs of" + of);
  const auto runs = exchanged(watch, [&] { return gather(x, my_runs, "runs", runs_bytes); });
  const auto votes = validate::vote(groups, runs);
  validate::FleetFindings f;
  f.rank = me.env.rank;
  watch.set_phase("comparing and replaying outliers of" + of);
  f.findings = exchanged(
      watch, [&] { return settle(x, votes, me.scenarios, mine, mine_plants, me.device, v, me.scratch, rep); });
  f.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - me.start).count();
  std::vector<FleetFinding> findings;
  watch.set_phase("exchanging the findings of" + of);
  const auto gathered = exchanged(watch, [&] { return gather(x, f, "findings"); });
  for (const auto& g : gathered) findings.insert(findings.end(), g.findings.begin(), g.findings.end());
  if (me.env.rank == 0) {
    log << "repetition " << rep << ": " << findings.size() << " outlier finding(s)\n" << std::flush;
  }
  std::lock_guard<std::mutex> lock(progress.mutex);
  progress.votes.push_back(votes);
  progress.runs.push_back(runs);
  progress.findings.push_back(findings);
  return gathered[0].elapsed_s;
}

// The result every rank returns: the verdict, each group's and each failing rank's line; rank 0 publishes the report.
FleetResult fleet_result(const FleetSummary& s, FleetProgress& progress) {
  FleetResult result;
  result.pass = s.pass;
  result.lines.push_back(s.verdict);
  for (const auto& g : s.groups)
    result.lines.push_back("group " + std::to_string(g.id) + (g.main ? " (main)" : "") + ": " + g.message);
  for (const auto& r : s.ranks)
    if (!r.pass) result.lines.push_back("rank " + std::to_string(r.rank) + ": " + r.message);
  if (progress.out) {
    publish_report(*progress.out, s);
    result.written = true;
    result.reports_dir = progress.out->final_dir();
  }
  return result;
}

}  // namespace

// The phases: this rank's identity and bad input, exchanged and refused alike on every rank before anything trains;
// the repetitions; the summary every rank computes alike, and rank 0's report.
FleetResult validate_fleet(RunOptions opts, const ValidateOptions& v, std::ostream& log) {
  const auto start = std::chrono::steady_clock::now();
  validate::settle_process();
  if (opts.scenarios.empty() && opts.suite.empty()) opts.suite = "validate";
  distributed::apply_slurm_environment();  // an srun task: its SLURM_* variables as torchrun's
  if (!distributed::in_distributed_environment())
    throw std::invalid_argument(
        "--fleet: this process is not a rank of a job (RANK and WORLD_SIZE are not set, nor SLURM_PROCID and "
        "SLURM_NTASKS). HINT: start it with torchrun (`torchrun --nproc_per_node N --no-python ampcheck validate "
        "--fleet ...`) or srun (examples/slurm/validate_fleet.sbatch)");
  const distributed::RankEnv env = distributed::rank_env_from_environment();
  FleetRank rank{env, fleet_device(opts, env.local_rank), {}, {}, "", start};
  const validate::Fingerprint fp = engine::stack_fingerprint(rank.device);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(v.fleet_timeout_s * 1000));

  // the watch: from here on a rank that dies or stops answering is named, and rank 0 reports what was done
  FleetProgress progress;
  distributed::WatchOptions wo;
  wo.lost_after = std::chrono::milliseconds(static_cast<int64_t>(v.fleet_lost_after_s * 1000));
  wo.start_grace = timeout;
  wo.host = hostname();
  distributed::RankWatch watch(env, wo, [&progress, r = env.rank](const auto& lost, const std::string& why) {
    on_fleet_stop(progress, r, lost, why);
  });

  // ---- 0. identities and bad input, before anything trains
  watch.set_phase("preparing");
  const FleetRankIdentity me = prepare_rank_and_identity(rank, opts, v, fp, wo.host);
  watch.set_phase("exchanging identities");
  distributed::RankExchange x(env, rank.device, timeout, "fleet");
  int64_t identity_bytes = 0;
  const auto ids = exchanged(watch, [&] { return gather(x, me, "identity", &identity_bytes); });
  refuse_bad_input(ids, me, watch);
  exchanged(watch, [&] {
    refuse_different_inputs(x, ids, rank.scenarios);
    return 0;
  });
  const auto groups = validate::group_by_fingerprint(ids);
  if (env.rank == 0) {
    log << "fleet: " << env.world_size << " ranks, " << groups.size() << " stack group(s), " << x.backend_name() << "\n"
        << std::flush;
  }
  // a replay's checkpoint: a hidden directory of this rank beside --out (rank 0's staging directory holds only the
  // report, which the watch may publish at any time)
  const auto [parent, name] = io::parent_and_name(opts.out_dir);
  rank.scratch = parent + "/." + name + ".fleet-rank" + std::to_string(env.rank) + "-" + std::to_string(::getpid());
  {
    std::lock_guard<std::mutex> lock(progress.mutex);
    progress.ids = ids;
    progress.groups = groups;
    progress.scratch = rank.scratch;
    if (env.rank == 0) progress.out = std::make_unique<RunDirectory>(opts, /*single_writer=*/true);
  }

  // ---- the repetitions
  const int64_t most = v.repeat > 0 ? v.repeat : (v.duration_s > 0 ? int64_t(1) << 40 : 1);
  int64_t runs_bytes = 0;
  for (int64_t rep = 1; rep <= most; ++rep) {
    const double elapsed_on_rank0 = fleet_repetition(rep, rank, groups, v, x, watch, progress, &runs_bytes, log);
    // --duration: rank 0's clock decides for everyone, so all stop together
    if (v.duration_s > 0 && elapsed_on_rank0 >= v.duration_s) break;
  }
  watch.finish();  // every rank finished every repetition: the result below stands
  if (io::file_exists(rank.scratch)) io::remove_tree(rank.scratch);

  FleetSummary s = summarize_fleet(ids, groups, progress.votes, progress.runs, progress.findings);
  s.duration_s = v.duration_s;
  s.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto& t = x.traffic();
  s.exchange = {x.backend_name(), t.exchanges, t.bytes_sent,      t.bytes_received,
                identity_bytes,   runs_bytes,  t.largest_message, t.seconds};
  return fleet_result(s, progress);
}

}  // namespace ampcheck::usecases
