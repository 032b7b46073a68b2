// `validate --fleet`'s pure pieces (validate/fleet.h, usecases/fleet_report.h, distributed/rank_exchange.h's Slurm
// mapping), on synthetic ranks: the trajectory hash sees exactly what the bitwise comparison sees, the majority's
// trajectory survives its broadcast encoding, ranks group by the fingerprint keys that change bits (drift named, a
// driver difference not), the vote names outliers and refuses to guess without a majority, --plant-rank's grammar,
// srun's variables mapped to torchrun's, and the summary's per-rank rates and verdict. The end-to-end runs under
// torchrun are CTest cpu.validate_fleet (validate_fleet.sh).
#include "distributed/rank_exchange.h"
#include "usecases/fleet_report.h"
#include "io/record_json.h"
#include "validate/fleet.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace ampcheck;
using validate::FleetRankIdentity;
using validate::FleetRankStatus;
using validate::FleetRuns;
using validate::GoldenResult;

namespace {

trajectory::Trajectory small_trajectory() {
  trajectory::Trajectory t;
  for (int s = 0; s < 3; ++s) {
    std::array<double, trajectory::kNumColumns> row{};
    for (int c = 0; c < trajectory::kNumColumns; ++c) row[c] = 0.5 * s + c;
    t.rows.push_back(row);
  }
  t.digests.tensors = {"fc1.weight", "fc1.bias"};
  t.digests.params = {{1, 2}, {3, 4}, {5, 6}};
  t.digests.grads = {{7, 8}, {9, 10}, {11, 12}};
  return t;
}

FleetRankIdentity rank_on(int64_t rank, const std::string& capability, const std::string& driver = "580") {
  FleetRankIdentity r;
  r.rank = rank;
  r.host = rank < 2 ? "node-a" : "node-b";
  r.device = "cpu";
  r.golden_class = "cpu-" + capability;
  r.fingerprint = {
      {"torch", "2.11.0"}, {"device_class", "cpu"}, {"aten_cpu_capability", capability}, {"nvidia_driver", driver}};
  return r;
}

FleetRuns runs_of(int64_t rank, const std::string& hash) {
  FleetRuns r;
  r.rank = rank;
  r.runs.push_back({"validate-fp32-mlp-sgd", trajectory::RunStatus::Completed, "", hash, 12, "",
                    GoldenResult::NotCompared, "no golden of class cpu-x"});
  return r;
}

}  // namespace

TEST(ValidateFleetHash, SeesWhatTheBitwiseComparisonSees) {
  const auto a = small_trajectory();
  auto b = a;
  EXPECT_EQ(validate::trajectory_hash(a), validate::trajectory_hash(b));
  b.rows[1][trajectory::kStepTimeMs] += 1;  // the step time is never compared
  EXPECT_EQ(validate::trajectory_hash(a), validate::trajectory_hash(b)) << "the step time must not count";
  b.digests.grads[2][1] ^= 1;  // one bit of one gradient's digest
  EXPECT_NE(validate::trajectory_hash(a), validate::trajectory_hash(b));
  auto c = a;
  uint64_t bits = 0;
  std::memcpy(&bits, &c.rows[0][trajectory::kLoss], 8);
  bits ^= 1;  // the lowest bit of one loss
  std::memcpy(&c.rows[0][trajectory::kLoss], &bits, 8);
  EXPECT_NE(validate::trajectory_hash(a), validate::trajectory_hash(c));
  EXPECT_FALSE(validate::compare_bitwise(c, a).identical);
}

TEST(ValidateFleetHash, TheBroadcastEncodingRoundTripsAndRefusesATruncatedMessage) {
  const auto a = small_trajectory();
  const std::string bytes = validate::encode_trajectory(a);
  const auto back = validate::decode_trajectory(bytes);
  EXPECT_TRUE(validate::compare_bitwise(back, a).identical) << validate::compare_bitwise(back, a).message;
  EXPECT_EQ(validate::trajectory_hash(back), validate::trajectory_hash(a));
  EXPECT_THROW(validate::decode_trajectory(bytes.substr(0, bytes.size() - 3)), std::runtime_error);
  EXPECT_THROW(validate::decode_trajectory(bytes + "x"), std::runtime_error);
  std::string huge = bytes;
  const uint64_t rows = uint64_t(1) << 60;  // a count past the message's length: refused, not allocated
  std::memcpy(huge.data(), &rows, 8);
  EXPECT_THROW(validate::decode_trajectory(huge), std::runtime_error);
}

TEST(ValidateFleetGroups, AnotherCapabilityIsDriftADriverIsNot) {
  const std::vector<FleetRankIdentity> ids = {rank_on(0, "avx512"), rank_on(1, "avx512", "590"), rank_on(2, "avx512"),
                                              rank_on(3, "avx2")};
  const auto groups = validate::group_by_fingerprint(ids);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].ranks, (std::vector<int64_t>{0, 1, 2}));  // the largest group first: the main stack
  EXPECT_TRUE(groups[0].drift.empty());
  EXPECT_EQ(groups[0].varying_keys, std::vector<std::string>{"nvidia_driver"}) << "a driver does not change bits";
  EXPECT_EQ(groups[1].ranks, std::vector<int64_t>{3});
  EXPECT_EQ(groups[1].drift_description, "aten_cpu_capability: avx512 -> avx2");
  EXPECT_EQ(groups[1].golden_class, "cpu-avx2");
}

TEST(ValidateFleetVote, NamesTheOutlierAndRefusesToGuessWithoutAMajority) {
  std::vector<FleetRankIdentity> ids = {rank_on(0, "avx512"), rank_on(1, "avx512"), rank_on(2, "avx512"),
                                        rank_on(3, "avx512"), rank_on(4, "avx2")};
  const auto groups = validate::group_by_fingerprint(ids);
  const auto votes = validate::vote(
      groups, {runs_of(0, "aa"), runs_of(1, "aa"), runs_of(2, "bb"), runs_of(3, "aa"), runs_of(4, "cc")});
  ASSERT_EQ(votes.size(), 2u);
  EXPECT_EQ(votes[0].outliers, std::vector<int64_t>{2});
  EXPECT_EQ(votes[0].majority_rank, 0);
  EXPECT_FALSE(votes[0].no_majority);
  EXPECT_TRUE(votes[1].outliers.empty()) << "a rank alone is its own majority: drift, not an outlier";
  EXPECT_EQ(validate::votes_to_settle(votes).size(), 1u);
  // two ranks that disagree: nobody can tell which is wrong
  const auto two = validate::group_by_fingerprint({rank_on(0, "avx512"), rank_on(1, "avx512")});
  const auto split = validate::vote(two, {runs_of(0, "aa"), runs_of(1, "bb")});
  EXPECT_TRUE(split[0].no_majority);
  EXPECT_TRUE(split[0].outliers.empty());
  EXPECT_TRUE(validate::votes_to_settle(split).empty());
  // a run that did not complete holds no hash: it is outvoted
  const auto failed =
      validate::vote(validate::group_by_fingerprint({rank_on(0, "x"), rank_on(1, "x"), rank_on(2, "x")}),
                     {runs_of(0, "aa"), runs_of(1, ""), runs_of(2, "aa")});
  EXPECT_EQ(failed[0].outliers, std::vector<int64_t>{1});
}

TEST(ValidateFleetVote, GoldensOutrankTheMajorityAndASmallMajorityCannotTell) {
  const auto groups = validate::group_by_fingerprint({rank_on(0, "x"), rank_on(1, "x"), rank_on(2, "x")});
  auto with_golden = [](int64_t rank, const std::string& hash, GoldenResult golden) {
    FleetRuns r = runs_of(rank, hash);
    r.runs[0].golden = "g.h5";
    r.runs[0].golden_result = golden;
    return r;
  };
  // issue 52: ranks 1 and 2 carry the same flip; rank 0 is the golden's bit for bit
  const auto gv = validate::vote(
      groups, {with_golden(0, "aa", GoldenResult::Identical), with_golden(1, "bb", GoldenResult::Differs),
               with_golden(2, "bb", GoldenResult::Differs)});
  EXPECT_TRUE(gv[0].against_golden);
  EXPECT_EQ(gv[0].cleared, std::vector<int64_t>{0});
  EXPECT_EQ(gv[0].outliers, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(validate::votes_to_settle(gv).size(), 1u);
  // without a golden, 2 vs 1 cannot tell which side (kFleetMinMajority 3); 3 vs 1 names the one
  const auto pv = validate::vote(groups, {runs_of(0, "aa"), runs_of(1, "bb"), runs_of(2, "bb")});
  EXPECT_TRUE(pv[0].cannot_tell);
  EXPECT_TRUE(pv[0].outliers.empty());
  EXPECT_TRUE(validate::votes_to_settle(pv).empty());
  auto s = usecases::summarize_fleet({rank_on(0, "x"), rank_on(1, "x"), rank_on(2, "x")}, groups, {pv},
                                     {{runs_of(0, "aa"), runs_of(1, "bb"), runs_of(2, "bb")}}, {{}});
  EXPECT_FALSE(s.pass);
  for (const auto& r : s.ranks) EXPECT_EQ(r.status, FleetRankStatus::CannotTell) << r.message;
  // a 2-2 split with goldens: resolved by them
  const auto four =
      validate::group_by_fingerprint({rank_on(0, "x"), rank_on(1, "x"), rank_on(2, "x"), rank_on(3, "x")});
  const auto sv = validate::vote(
      four, {with_golden(0, "aa", GoldenResult::Identical), with_golden(1, "aa", GoldenResult::Identical),
             with_golden(2, "bb", GoldenResult::Differs), with_golden(3, "bb", GoldenResult::Differs)});
  EXPECT_TRUE(sv[0].no_majority);
  EXPECT_FALSE(sv[0].cannot_tell);
  EXPECT_EQ(sv[0].outliers, (std::vector<int64_t>{2, 3}));
}

TEST(ValidateFleetVote, PairsRunsByNameNotByPosition) {
  // rank 1 ran the same two scenarios in another order: its runs are paired by name, it agrees
  FleetRuns r0 = runs_of(0, "aa"), r1 = runs_of(1, "xx"), r2 = runs_of(2, "aa");
  for (auto* r : {&r0, &r2})
    r->runs.push_back({"second", trajectory::RunStatus::Completed, "", "zz", 12, "", GoldenResult::NotCompared, ""});
  r1.runs = {{"second", trajectory::RunStatus::Completed, "", "zz", 12, "", GoldenResult::NotCompared, ""}, r0.runs[0]};
  const auto groups = validate::group_by_fingerprint({rank_on(0, "x"), rank_on(1, "x"), rank_on(2, "x")});
  const auto votes = validate::vote(groups, {r0, r1, r2});
  ASSERT_EQ(votes.size(), 2u);
  for (const auto& v : votes) EXPECT_TRUE(v.outliers.empty()) << v.scenario;
  // a rank without a run of that name holds no hash: outvoted, never indexed past its runs
  r1.runs.pop_back();
  const auto lacking = validate::vote(groups, {r0, r1, r2});
  EXPECT_EQ(lacking[0].outliers, std::vector<int64_t>{1});
}

TEST(ValidateFleetWords, EachWordRoundTripsAndTheRecordsHoldTheWords) {
  for (const auto& w : validate::enum_words(GoldenResult{}))
    EXPECT_EQ(validate::to_string(*validate::parse_golden_result(w)), w);
  for (const auto& w : validate::enum_words(FleetRankStatus{}))
    EXPECT_EQ(validate::to_string(*validate::parse_fleet_rank_status(w)), w);
  EXPECT_FALSE(validate::parse_fleet_rank_status("agree").has_value());
  EXPECT_EQ(validate::to_string(FleetRankStatus::DiffersFromGolden), "differs from its golden");
  // the records' JSON holds the words (the ranks' messages, summary.json), and reads them back
  FleetRuns runs = runs_of(0, "aa");
  runs.runs[0].golden_result = GoldenResult::Differs;
  const nlohmann::json j = io::record_to_json(runs);
  EXPECT_EQ(j["runs"][0]["golden_result"], "differs") << j.dump();
  EXPECT_EQ(io::record_to_json(runs_of(0, "aa"))["runs"][0]["golden_result"], "");
  FleetRuns back;
  io::record_from_json(j, back);
  EXPECT_EQ(back.runs[0].golden_result, GoldenResult::Differs);
  usecases::FleetRankRow row;
  row.status = FleetRankStatus::CannotTell;
  EXPECT_EQ(io::record_to_json(row)["status"], "cannot tell");
  nlohmann::json bad = io::record_to_json(row);
  bad["status"] = "agree";
  try {
    io::record_from_json(bad, row);
    ADD_FAILURE() << "a rank status that is no status's word was read";
  } catch (const io::FieldError& e) {
    EXPECT_EQ(e.field, "status");
    EXPECT_NE(e.expected.find("cannot tell"), std::string::npos) << e.what();
  }
}

TEST(ValidateFleetInputs, NamesTheOptionTheScenarioAndTheRanks) {
  std::vector<FleetRankIdentity> ids = {rank_on(0, "x"), rank_on(1, "x"), rank_on(2, "x")};
  for (auto& id : ids) {
    id.options = {{"--steps", "12"}, {"--repeat", "(once)"}};
    id.scenarios = {{"mlp", "h1"}, {"gpt", "h2"}};
  }
  EXPECT_TRUE(validate::fleet_input_differences(ids).empty());
  std::swap(ids[1].scenarios[0], ids[1].scenarios[1]);  // another order: the same scenarios
  EXPECT_TRUE(validate::fleet_input_differences(ids).empty());
  ids[2].options[0].value = "30";
  ids[2].scenarios = {{"mlp", "h9"}, {"gpt-newer", "h2"}};
  const auto lines = validate::fleet_input_differences(ids);
  ASSERT_EQ(lines.size(), 4u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0], "--steps: 12 on ranks 0,1; 30 on rank 2");
  EXPECT_EQ(lines[1], "scenario 'mlp': configuration h1 on ranks 0,1; h9 on rank 2");
  EXPECT_EQ(lines[2], "scenario 'gpt': only on ranks 0,1 (not on rank 2)");
  EXPECT_EQ(lines[3], "scenario 'gpt-newer': only on rank 2 (not on ranks 0,1)");
  EXPECT_EQ(validate::scenarios_configured_apart(ids), std::vector<std::string>{"mlp"});
  const auto fields = validate::configuration_differences("mlp", {"kind=mlp lr=0.05 steps=12",
                                                                  "kind=mlp lr=0.05 "
                                                                  "steps=12",
                                                                  "kind=mlp lr=0.02 steps=12"});
  ASSERT_EQ(fields.size(), 1u);
  EXPECT_EQ(fields[0], "scenario 'mlp': rank 2 differs from rank 0: lr=0.05 -> lr=0.02");
}

TEST(ValidateFleetSummary, AStoppedFleetNamesTheLostRankAndKeepsTheRepetitionsDone) {
  const std::vector<FleetRankIdentity> ids = {rank_on(0, "x"), rank_on(1, "x"), rank_on(2, "x")};
  const auto groups = validate::group_by_fingerprint(ids);
  const std::vector<FleetRuns> runs = {runs_of(0, "aa"), runs_of(1, "aa"), runs_of(2, "aa")};
  const auto votes = validate::vote(groups, runs);
  auto s = usecases::summarize_fleet(ids, groups, {votes, votes}, {runs, runs}, {{}, {}});
  ASSERT_TRUE(s.pass);
  usecases::mark_stopped(s, {{1, "rank 1 (node-a) stopped answering (silent 5.2 s)"}}, "rank 1 stopped answering");
  EXPECT_FALSE(s.pass);
  EXPECT_EQ(s.repetitions, 2);
  EXPECT_EQ(s.lost_ranks, std::vector<int64_t>{1});
  EXPECT_EQ(s.ranks[1].status, FleetRankStatus::Lost);
  EXPECT_EQ(s.ranks[0].status, FleetRankStatus::Agrees);
  EXPECT_EQ(s.verdict.rfind("INCOMPLETE: rank 1 stopped answering. Of the 2 repetitions", 0), 0u) << s.verdict;
  EXPECT_NE(usecases::fleet_junit_xml(s).find("failures=\"1\""), std::string::npos);
}

TEST(ValidateFleetPlant, PlantRankGrammar) {
  const auto p = validate::parse_plant_rank("2:bitflip:param:fc1.weight:0:30@5");
  EXPECT_EQ(p.rank, 2);
  EXPECT_EQ(p.repetition, 0);
  EXPECT_EQ(p.plant.injections.size(), 1u);
  const auto q = validate::parse_plant_rank("1/3:bitflip:grad:fc1.weight:0:30@5:transient");
  EXPECT_EQ(q.rank, 1);
  EXPECT_EQ(q.repetition, 3);
  EXPECT_TRUE(q.plant.transient);
  for (const char* bad : {"tf32", ":tf32", "x:tf32", "1/0:tf32", "1/:tf32", "-1:tf32", "2:cosmic-ray"}) {
    try {
      validate::parse_plant_rank(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("--plant-rank '") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(ValidateFleetSlurm, SrunVariablesMapToTorchrunsAndTorchrunWins) {
  EXPECT_EQ(distributed::first_slurm_host("node[01-04,07],gpu7"), "node01");
  EXPECT_EQ(distributed::first_slurm_host("a,b"), "a");
  EXPECT_EQ(distributed::first_slurm_host("gpu-[3,5]-x"), "gpu-3-x");
  EXPECT_THROW(distributed::first_slurm_host("node[01"), std::runtime_error);
  const auto vars = distributed::slurm_rank_variables({{"SLURM_PROCID", "5"},
                                                       {"SLURM_NTASKS", "8"},
                                                       {"SLURM_LOCALID", "1"},
                                                       {"SLURM_JOB_NODELIST", "node[12-15]"},
                                                       {"SLURM_JOB_ID", "123456"}});
  const std::vector<std::pair<std::string, std::string>> want = {
      {"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node12"}, {"MASTER_PORT", "23456"}};
  EXPECT_EQ(vars, want);
  EXPECT_TRUE(distributed::slurm_rank_variables(
                  {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}})
                  .empty());
  EXPECT_TRUE(distributed::slurm_rank_variables({{"SLURM_JOB_ID", "1"}}).empty());
}

TEST(ValidateFleetSummary, AFaultInOneRepetitionOfFiveIsReportedWithItsRate) {
  // four ranks of the main stack (without a golden a majority of 3 names an outlier: kFleetMinMajority) and drift
  const std::vector<FleetRankIdentity> ids = {rank_on(0, "avx512"), rank_on(1, "avx512"), rank_on(2, "avx512"),
                                              rank_on(3, "avx2"), rank_on(4, "avx512")};
  const auto groups = validate::group_by_fingerprint(ids);
  std::vector<std::vector<validate::FleetVote>> votes;
  std::vector<std::vector<FleetRuns>> runs;
  std::vector<std::vector<validate::FleetFinding>> findings;
  for (int rep = 1; rep <= 5; ++rep) {
    runs.push_back(
        {runs_of(0, "aa"), runs_of(1, rep == 3 ? "bb" : "aa"), runs_of(2, "aa"), runs_of(3, "cc"), runs_of(4, "aa")});
    votes.push_back(validate::vote(groups, runs.back()));
    findings.push_back({});
    if (rep == 3) {
      validate::FleetFinding f;
      f.rank = 1;
      f.repetition = 3;
      f.scenario = "validate-fp32-mlp-sgd";
      f.difference = "first difference: step 4, parameter fc1.weight";
      f.replay = validate::ReplayKind::Transient;
      findings.back().push_back(f);
    }
  }
  const auto s = usecases::summarize_fleet(ids, groups, votes, runs, findings);
  EXPECT_FALSE(s.pass);
  EXPECT_EQ(s.ranks[1].status, FleetRankStatus::Outlier);
  EXPECT_EQ(s.ranks[1].rate, "1/5");
  EXPECT_NE(s.ranks[1].message.find("transient"), std::string::npos) << s.ranks[1].message;
  EXPECT_TRUE(s.ranks[0].pass && s.ranks[2].pass);
  EXPECT_TRUE(s.ranks[3].pass) << "drift is not corruption: " << s.ranks[3].message;
  EXPECT_NE(s.verdict.find("configuration drift"), std::string::npos) << s.verdict;
  const std::string junit = usecases::fleet_junit_xml(s);
  EXPECT_NE(junit.find("tests=\"5\" failures=\"1\""), std::string::npos) << junit;
}

namespace {

// One repetition of the FP32 MLP on ranks `ids` (one run each: its hash and status), summarized.
usecases::FleetSummary summarize_once(const std::vector<FleetRankIdentity>& ids, std::vector<FleetRuns> runs) {
  const auto groups = validate::group_by_fingerprint(ids);
  const auto votes = validate::vote(groups, runs);
  return usecases::summarize_fleet(ids, groups, {votes}, {runs}, {{}});
}

FleetRuns nonfinite_run(int64_t rank, const std::string& hash) {
  FleetRuns r = runs_of(rank, hash);
  r.runs[0].status = trajectory::RunStatus::NonFinite;
  r.runs[0].steps = 6;
  return r;
}

// a run judged against the FP32 references (validate's statistical verdict)
FleetRuns judged(FleetRuns r, const std::string& verdict, bool pass) {
  r.runs[0].reference_class = "cpu";
  r.runs[0].statistical_verdict = verdict;
  r.runs[0].statistical_pass = pass;
  r.runs[0].statistical_message = pass ? "every outcome signal within its allowed deviation" : "expected tracks";
  return r;
}

}  // namespace

TEST(ValidateFleetSummary, AFailingMajorityDoesNotOutvoteASoundRun) {
  // ranks 1-3 carry the same exponent flip: their runs went non-finite alike, a majority of 3 (kFleetMinMajority)
  // against the healthy rank 0 — which is named their outlier by the vote, and must not be blamed
  const std::vector<FleetRankIdentity> ids = {rank_on(0, "avx512"), rank_on(1, "avx512"), rank_on(2, "avx512"),
                                              rank_on(3, "avx512")};
  const auto s =
      summarize_once(ids, {runs_of(0, "aa"), nonfinite_run(1, "nn"), nonfinite_run(2, "nn"), nonfinite_run(3, "nn")});
  ASSERT_EQ(s.votes.size(), 1u);
  EXPECT_EQ(s.votes[0].outliers, std::vector<int64_t>{0}) << "the vote itself still names rank 0";
  EXPECT_TRUE(s.ranks[0].pass) << s.ranks[0].message;
  EXPECT_EQ(s.ranks[0].status, FleetRankStatus::Agrees);
  EXPECT_NE(s.ranks[0].message.find("not blamed"), std::string::npos) << s.ranks[0].message;
  for (int r = 1; r <= 3; ++r) EXPECT_EQ(s.ranks[r].status, FleetRankStatus::NonFinite) << s.ranks[r].message;

  // the same with finite runs whose majority fails the FP32 references while rank 0 tracks them
  const auto t =
      summarize_once(ids, {judged(runs_of(0, "aa"), "tracks", true), judged(runs_of(1, "dd"), "diverges", false),
                           judged(runs_of(2, "dd"), "diverges", false), judged(runs_of(3, "dd"), "diverges", false)});
  EXPECT_TRUE(t.ranks[0].pass) << t.ranks[0].message;
  EXPECT_EQ(t.ranks[0].statistical, "tracks the cpu FP32 references in 1 of 1 run");
  for (int r = 1; r <= 3; ++r) {
    EXPECT_EQ(t.ranks[r].status, FleetRankStatus::Diverges) << t.ranks[r].message;
    EXPECT_NE(t.ranks[r].message.find("statistical verdict against the cpu FP32 references is diverges"),
              std::string::npos)
        << t.ranks[r].message;
  }
  // without the references a finite majority of 3 still decides: rank 0 is its outlier (no vote can see a faulty
  // majority's finite flip)
  const auto u = summarize_once(ids, {runs_of(0, "aa"), runs_of(1, "dd"), runs_of(2, "dd"), runs_of(3, "dd")});
  EXPECT_EQ(u.ranks[0].status, FleetRankStatus::Outlier);
}

TEST(ValidateFleetSummary, ANonFiniteRunIsAFaultWhereTheScenarioExpectsItToComplete) {
  // every rank's run went non-finite: no rank completed to compare with, no references — the scenario (a validation
  // scenario: expect tracks) expects its run to complete
  const std::vector<FleetRankIdentity> ids = {rank_on(0, "avx512"), rank_on(1, "avx2")};
  const auto s = summarize_once(ids, {nonfinite_run(0, "nn"), nonfinite_run(1, "mm")});
  EXPECT_FALSE(s.pass) << s.verdict;
  for (const auto& r : s.ranks) {
    EXPECT_EQ(r.status, FleetRankStatus::NonFinite) << r.message;
    EXPECT_NE(r.message.find("no rank's run completed"), std::string::npos) << r.message;
  }
  // a scenario that expects its run to go non-finite: no fault
  auto expected0 = nonfinite_run(0, "nn"), expected1 = nonfinite_run(1, "mm");
  expected0.runs[0].nonfinite_expected = expected1.runs[0].nonfinite_expected = true;
  const auto e = summarize_once(ids, {expected0, expected1});
  EXPECT_TRUE(e.pass) << e.verdict;
}
