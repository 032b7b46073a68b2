// Reports: summary.json round trip, junit.xml (one testcase per scenario, failures carry the message, XML escaped),
// summary.md, and compare — two runs of the same setup pass, a planted regression (slower step, more memory,
// changed verdict, vanished scenario) is flagged and named.
#include "report/compare.h"
#include "report/summary.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace ampcheck::report;

namespace {
RunSummary sample() {
  RunSummary s;
  s.ampcheck_version = "0.1.0";
  s.libtorch_version = "2.11.0";
  s.device_name = "cpu";
  s.device_class = "cpu";
  s.date = "2026-12-02T00:00:00Z";
  s.suite = "ci";
  ScenarioSummary a;
  a.name = "fp16-autocast-scaler";
  a.strategy = "fp16-autocast";
  a.device_class = "cpu";
  a.expect = a.verdict = "tracks";
  a.pass = true;
  a.message = "within the band";
  a.steps = 200;
  a.max_deviation_bands = 0.002;
  a.final_loss_ratio = 1.0;
  a.first_loss = 5.5;
  a.final_loss = 1.3;
  a.median_step_ms = 30;
  a.tokens_per_s = 17000;
  a.peak_memory_bytes = 1 << 30;
  ScenarioSummary b = a;
  b.name = "clip-before-unscale";
  b.expect = "stalls";
  b.verdict = "diverges";
  b.pass = false;
  b.message = "expected stalls, got diverges: left the band at step 10 <&>";
  b.first_divergence_step = 10;
  s.scenarios = {a, b};
  return s;
}
std::string dir() {
  std::string d = ::testing::TempDir() + "/ampcheck_report_" + std::to_string(getpid());
  ::mkdir(d.c_str(), 0755);
  return d;
}
std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1)) ++n;
  return n;
}
}  // namespace

TEST(ReportSummary, JsonRoundTripsEveryField) {
  const std::string d = dir();
  RunSummary s = sample();
  s.scenarios[1].final_loss_ratio = NAN;  // written as null, read back as NaN
  write_run_reports(d, s);
  RunSummary back = read_summary_json(d + "/summary.json");
  ASSERT_EQ(back.scenarios.size(), 2u);
  EXPECT_EQ(back.suite, "ci");
  EXPECT_EQ(back.scenarios[0].name, "fp16-autocast-scaler");
  EXPECT_EQ(back.scenarios[0].median_step_ms, 30);
  EXPECT_EQ(back.scenarios[0].peak_memory_bytes, 1 << 30);
  EXPECT_TRUE(std::isnan(back.scenarios[1].final_loss_ratio));
  EXPECT_EQ(back.scenarios[1].first_divergence_step, 10);
  EXPECT_EQ(back.passed(), 1);
  EXPECT_EQ(back.failed(), 1);
}

TEST(ReportSummary, BadSummaryIsAnErrorNamingFileAndField) {
  const std::string p = dir() + "/bad.json";
  std::ofstream(p) << R"({"schema": "ampcheck-summary", "version": 99, "scenarios": []})";
  try {
    read_summary_json(p);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(p + ": field 'version' is 99"), std::string::npos) << e.what();
  }
}

TEST(ReportJunit, OneTestcasePerScenarioAndFailuresCarryTheEscapedMessage) {
  const std::string d = dir();
  write_run_reports(d, sample());
  const std::string x = slurp(d + "/junit.xml");
  EXPECT_EQ(count(x, "<testcase "), 2u);
  EXPECT_EQ(count(x, "<failure "), 1u);
  EXPECT_NE(x.find("tests=\"2\" failures=\"1\""), std::string::npos);
  EXPECT_NE(x.find("left the band at step 10 &lt;&amp;&gt;"), std::string::npos) << x;
  EXPECT_EQ(x.find("<&>"), std::string::npos) << "unescaped text in XML";
}

TEST(ReportMarkdown, TableHasARowPerScenarioAndListsFailures) {
  const std::string d = dir();
  write_run_reports(d, sample());
  const std::string m = slurp(d + "/summary.md");
  EXPECT_NE(m.find("1 passed, 1 failed"), std::string::npos);
  EXPECT_NE(m.find("| clip-before-unscale | fp16-autocast | stalls | diverges |"), std::string::npos) << m;
  EXPECT_NE(m.find("- **clip-before-unscale**: expected stalls"), std::string::npos) << m;
}

TEST(ReportCompare, SameSetupPasses) {
  const auto c = compare_runs(sample(), sample(), {});
  EXPECT_FALSE(c.regressed()) << format_comparison(sample(), sample(), c);
}

TEST(ReportCompare, SlowerStepMoreMemoryAndChangedVerdictAreRegressions) {
  RunSummary slow = sample();
  slow.scenarios[0].median_step_ms = 30 * 1.25;
  RunSummary fat = sample();
  fat.scenarios[0].peak_memory_bytes = static_cast<int64_t>(1.5 * (1 << 30));
  RunSummary changed = sample();
  changed.scenarios[0].verdict = "diverges";
  changed.scenarios[0].pass = false;
  RunSummary missing = sample();
  missing.scenarios.pop_back();
  RunSummary faster = sample();
  faster.scenarios[0].median_step_ms = 20;  // a speed-up is no regression

  auto c = compare_runs(sample(), slow, {});
  ASSERT_TRUE(c.regressed());
  EXPECT_EQ(c.scenarios[0].regressions.at(0), "step time x1.25 > x1.1");
  EXPECT_TRUE(compare_runs(sample(), fat, {}).regressed());
  c = compare_runs(sample(), changed, {});
  ASSERT_TRUE(c.regressed());
  EXPECT_EQ(c.scenarios[0].regressions.at(0), "verdict tracks -> diverges");
  EXPECT_TRUE(compare_runs(sample(), missing, {}).regressed());
  EXPECT_FALSE(compare_runs(sample(), faster, {}).regressed());
  CompareThresholds loose;
  loose.max_slowdown = 1.3;
  EXPECT_FALSE(compare_runs(sample(), slow, loose).regressed()) << "the threshold is the user's";
}
