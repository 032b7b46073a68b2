// Reports: summary.json round trip, junit.xml (one testcase per scenario, failures carry the message, XML escaped),
// summary.md, and compare — two runs of the same setup pass, a planted regression (slower step, more memory,
// changed verdict, vanished scenario) is flagged and named.
#include "report/compare.h"
#include "report/html.h"
#include "report/summary.h"
#include "report/svg.h"

#include "engine/device.h"
#include "run/scenario_run.h"
#include "engine/step_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>
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
  a.workload = "gpt nano, batch 8 x 64";
  a.compute_dtype = "fp16";
  a.timing_method = "wall-clock";
  a.warmup_steps = 20;
  a.median_step_ms = 30;
  a.p10_step_ms = 29;
  a.p90_step_ms = 33;
  a.tokens_per_s = 17000;
  a.samples_per_s = 266;
  a.tflops = 0.1;
  a.peak_tflops = 0.4;
  a.mfu = 0.25;
  a.peak_memory_bytes = 1 << 30;
  a.peak_reserved_bytes = int64_t{3} << 29;
  ScenarioSummary b = a;
  b.name = "clip-before-unscale";
  b.expect = "stalls";
  b.verdict = "diverges";
  b.pass = false;
  b.message = "expected stalls, got diverges: left the band at step 10 <&>";
  b.first_divergence_step = 10;
  b.deciding_signal = "update_norm";
  b.max_signal = "update_norm";
  b.signals = {{"loss", "nats", true, false, true, "", -1, 12, 0.4, 0.01, 0.025, 0.004, 3.2, 3.19, "loss within"},
               {"update_norm", "log-ratio", true, true, true, "stalls", 10, 30, 7.4, -0.7, 0.095, 0.01, 0.49, 1.0,
                "updates 0.49x the reference's"},
               {"subnormal_grads", "fraction", true, true, false, "", 3, 5, 2.0, 0.06, 0.03, 0, 0.06, 0, "note: ..."}};
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
  EXPECT_EQ(back.scenarios[0].workload, "gpt nano, batch 8 x 64");
  EXPECT_EQ(back.scenarios[0].timing_method, "wall-clock");
  EXPECT_EQ(back.scenarios[0].warmup_steps, 20);
  EXPECT_EQ(back.scenarios[0].p90_step_ms, 33);
  EXPECT_EQ(back.scenarios[0].mfu, 0.25);
  EXPECT_EQ(back.scenarios[0].peak_reserved_bytes, int64_t{3} << 29);
  EXPECT_TRUE(std::isnan(back.scenarios[1].final_loss_ratio));
  EXPECT_EQ(back.scenarios[1].first_divergence_step, 10);
  EXPECT_EQ(back.scenarios[1].deciding_signal, "update_norm");
  ASSERT_EQ(back.scenarios[1].signals.size(), 3u);
  const auto& u = back.scenarios[1].signals[1];
  EXPECT_EQ(u.name, "update_norm");
  EXPECT_TRUE(u.fired && u.decides && u.judged);
  EXPECT_EQ(u.verdict, "stalls");
  EXPECT_EQ(u.first_step, 10);
  EXPECT_EQ(u.max_margin, 7.4);
  EXPECT_EQ(u.deviation, -0.7);
  EXPECT_EQ(u.allowed, 0.095);
  EXPECT_EQ(u.run_value, 0.49);
  EXPECT_FALSE(back.scenarios[1].signals[2].decides);
  EXPECT_EQ(back.passed(), 1);
  EXPECT_EQ(back.failed(), 1);
}

// A warning (a finding that did not set the verdict) reaches every output: summary.json (v4), junit.xml as a
// non-failing note, summary.md and report.html.
TEST(ReportSummary, WarningsReachEveryOutputAndDoNotFailTheTestcase) {
  const std::string d = dir() + "_warn";
  ::mkdir(d.c_str(), 0755);
  RunSummary s = sample();
  s.strict = true;
  s.scenarios[0].warnings = {{"zero_grads", "20% of grad elements zero vs 1.8% in FP32 <&>"}};
  write_run_reports(d, s);
  const RunSummary back = read_summary_json(d + "/summary.json");
  ASSERT_EQ(back.scenarios[0].warnings.size(), 1u);
  EXPECT_EQ(back.scenarios[0].warnings[0].signal, "zero_grads");
  EXPECT_EQ(back.scenarios[0].warnings[0].message, "20% of grad elements zero vs 1.8% in FP32 <&>");
  EXPECT_TRUE(back.strict);
  EXPECT_TRUE(back.scenarios[1].warnings.empty());
  EXPECT_NE(slurp(d + "/summary.json").find("\"version\": 6"), std::string::npos);
  const std::string junit = slurp(d + "/junit.xml");
  EXPECT_NE(junit.find("<property name=\"ampcheck.warning.zero_grads\" value=\"20% of grad elements zero vs 1.8% in "
                       "FP32 &lt;&amp;&gt;\"/>"),
            std::string::npos)
      << junit;
  EXPECT_EQ(count(junit, "<failure"), 1u) << "the warning is a note: only the failed scenario has a <failure>";
  EXPECT_NE(slurp(d + "/summary.md").find("- fp16-autocast-scaler · `zero_grads`: 20% of grad elements zero"),
            std::string::npos);
  write_html_report(d, s);
  const std::string html = slurp(d + "/report.html");
  EXPECT_NE(html.find("<li data-warning=\"zero_grads\"><b>warning</b>"), std::string::npos);
  EXPECT_NE(html.find("<span class=\"warn\">1 warning</span>"), std::string::npos);
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

// (v5) an engine_plan entry that is not an object names the field and the value instead of a JSON library type error
TEST(ReportSummary, BadEnginePlanEntryNamesTheField) {
  const std::string p = dir() + "/bad-plan.json";
  std::ofstream(p) << R"({"schema": "ampcheck-summary", "version": 5, "scenarios": [{"name": "a", "expect": "tracks",
      "verdict": "tracks", "pass": true, "engine_plan": [7]}]})";
  try {
    read_summary_json(p);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(
                  "field 'engine_plan' of scenario a: expected {option, label, applied, note} objects, got 7"),
              std::string::npos)
        << e.what();
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
  slow.scenarios[0].median_step_ms = 30 * 1.25;  // every step slower: p10 and p90 too
  slow.scenarios[0].p10_step_ms = 29 * 1.25;
  slow.scenarios[0].p90_step_ms = 33 * 1.25;
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

TEST(ReportSummary, Version1FilesAreStillRead) {
  const std::string p = dir() + "/v1.json";
  std::ofstream(p) << R"({"schema": "ampcheck-summary", "version": 1, "scenarios": [{"name": "a", "expect": "tracks",
    "verdict": "tracks", "pass": true, "median_step_ms": 12.5, "tokens_per_s": 100, "peak_memory_bytes": 7}]})";
  const RunSummary s = read_summary_json(p);
  ASSERT_EQ(s.scenarios.size(), 1u);
  EXPECT_EQ(s.scenarios[0].median_step_ms, 12.5);
  EXPECT_TRUE(std::isnan(s.scenarios[0].mfu));  // not in version 1
}

// ---------------------------------------------------------------------------------------------------------------
// measurement

TEST(ReportTiming, WarmupExcludedAndQuantilesInterpolated) {
  ampcheck::trajectory::Trajectory t;
  for (int i = 0; i < 100; ++i) {
    std::array<double, ampcheck::trajectory::kNumColumns> row{};
    row[ampcheck::trajectory::kStepTimeMs] = i < 10 ? 1000.0 : static_cast<double>(i);  // slow warm-up steps
    t.rows.push_back(row);
  }
  const auto st = ampcheck::run::step_timing(t, "wall-clock");
  EXPECT_EQ(st.warmup_steps, 10);  // max(2, 10%)
  EXPECT_EQ(st.timed_steps, 90);
  EXPECT_DOUBLE_EQ(st.median_ms, 54.5);        // steps 10..99: median of 10..99
  EXPECT_DOUBLE_EQ(st.p10_ms, 10 + 0.1 * 89);  // numpy's linear interpolation
  EXPECT_DOUBLE_EQ(st.p90_ms, 10 + 0.9 * 89);
  t.rows.resize(3);
  EXPECT_EQ(ampcheck::run::step_timing(t, "").warmup_steps, 2);
  t.rows.resize(1);
  EXPECT_EQ(ampcheck::run::step_timing(t, "").timed_steps, 1);  // a single step is still timed
}

TEST(ReportTiming, CpuStepTimerBracketsEachStep) {
  ampcheck::engine::StepTimer timer{at::Device(at::kCPU)};
  EXPECT_STREQ(timer.method(), "wall-clock");
  const auto t0 = std::chrono::steady_clock::now();
  for (int ms : {5, 20}) {
    timer.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    timer.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // between steps: not counted
  }
  const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const auto ms = timer.collect();
  ASSERT_EQ(ms.size(), 2u);
  // sleep_for sleeps at least as long as asked, however loaded the machine: each step lasts at least its sleep, and
  // the two >= 30 ms gaps lie outside the brackets, so the steps add up to at most the whole time minus 60 ms
  EXPECT_GE(ms[0], 5.0);
  EXPECT_GE(ms[1], 20.0);
  EXPECT_LE(ms[0] + ms[1], total_ms - 60.0);
  EXPECT_TRUE(timer.collect().empty());
}

TEST(ReportMemory, CpuPeakIsResetToTheCurrentResidentSet) {
  namespace e = ampcheck::engine;
  const at::Device cpu(at::kCPU);
  {
    std::vector<char> big(256 << 20, 1);  // touched: resident
    ASSERT_EQ(big[12345], 1);
  }
  const auto before = e::memory_stats(cpu);
  e::reset_peak_memory(cpu);
  const auto after = e::memory_stats(cpu);
  if (after.peak_allocated_bytes == before.peak_allocated_bytes)
    GTEST_SKIP() << "this kernel does not reset VmHWM through /proc/self/clear_refs";
  EXPECT_LT(after.peak_allocated_bytes, before.peak_allocated_bytes - (128 << 20));
  EXPECT_GE(after.peak_allocated_bytes, after.allocated_bytes - (16 << 20));
}

// ---------------------------------------------------------------------------------------------------------------
// report.html

namespace {
ScenarioSeries series(int64_t steps, std::vector<int64_t> skipped, bool completed) {
  ScenarioSeries s;
  s.loaded = true;
  s.status = completed ? "completed" : "error";
  for (int64_t i = 0; i < steps; ++i) {
    const double ref = 5.0 - 3.0 * static_cast<double>(i) / static_cast<double>(steps);
    s.reference_loss.push_back(ref);
    s.reference_smoothed.push_back(ref);
    s.band.push_back(0.05 * ref);
    if (completed) {
      s.loss.push_back(ref + 0.01);
      s.smoothed_loss.push_back(ref + 0.01);
      s.deviation_bands.push_back(0.01 / (0.05 * ref));
      s.loss_scale.push_back(65536.0);
    }
  }
  for (int64_t k : skipped) s.loss_scale[k] = 32768.0;
  s.skipped_steps = std::move(skipped);
  return s;
}
}  // namespace

TEST(ReportHtml, ASectionWithThreeChartsPerScenarioAndNothingExternal) {
  RunSummary s = sample();
  s.scenarios[1].name = "odd <name> & \"quotes\"";
  s.scenarios[1].verdict = "error";
  const std::string html = render_html(s, {series(50, {7, 21}, true), series(50, {}, false)});
  EXPECT_EQ(count(html, "<section class=\"scenario\""), 2u);
  EXPECT_EQ(count(html, "data-kind=\"loss\""), 2u);
  EXPECT_EQ(count(html, "data-kind=\"scale\""), 2u);
  EXPECT_EQ(count(html, "data-kind=\"deviation\""), 2u);
  EXPECT_EQ(count(html, "<line class=\"tick\""), 2u) << "one tick per skipped step";
  EXPECT_NE(html.find("odd &lt;name&gt; &amp; &quot;quotes&quot;"), std::string::npos);
  EXPECT_EQ(html.find("odd <name>"), std::string::npos) << "scenario names must be escaped";
  EXPECT_NE(html.find("raised at step 0"), std::string::npos);
  // every signal's comparison: a table row per signal, the deciding one marked with its verdict, a reported-only
  // signal beyond its allowance as a note
  EXPECT_EQ(count(html, "<tr data-signal="), 3u);
  EXPECT_NE(html.find("data-signal=\"update_norm\"><td>update_norm</td><td class=\"fail\">stalls"), std::string::npos);
  EXPECT_NE(html.find("data-signal=\"subnormal_grads\"><td>subnormal_grads</td><td class=\"warn\">diagnostic"),
            std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(count(html, "http"), count(html, "http://www.w3.org/2000/svg")) << "no URL but the SVG namespace";
}

// A sweep's page (issue 52): the answer first — recommendation, the strategies' table (ms/step with its spread and
// timing runs, speed ranking, tokens/s, peak memory), each localization with every probe and the fix — then the
// generic scenario table; escaped, self-contained.
TEST(ReportHtml, SweepPageLeadsWithTheAnswerEveryProbeAndTheFix) {
  RunSummary s = sample();
  SweepPage p;
  p.key = "abc123";
  p.recommendation = "not decisive: bf16-autocast: tracks FP32 <margin 0.1>";
  p.timing = "Speed: FP32's three runs 10 / 80 / 10 ms/step";
  SweepPage::Row f;
  f.strategy = "fp32";
  f.speed = "reference";
  f.ms = 10, f.p10_ms = 9, f.p90_ms = 12, f.speedup = 1, f.runs_ms = {10, 80, 10};
  f.peak_memory_bytes = 3 << 20;
  SweepPage::Row b;
  b.strategy = "bf16-autocast", b.outcome = "judged", b.verdict = "tracks", b.pass = true, b.speed = "not decisive";
  b.ms = 20, b.speedup = 0.5, b.noise = 8, b.tokens_per_s = 12345, b.retimed_ms = {20, 21, 19};
  b.retimed_fp32_ms = {10, 80, 10};
  SweepPage::Row h;
  h.strategy = "fp16-autocast-scaler", h.outcome = "judged", h.verdict = "nonfinite", h.speed = "slower";
  h.message = "first non-finite: module layers.1.attn";
  p.rows = {f, b, h};
  SweepPage::Localized l;
  l.strategy = "fp16-autocast-scaler";
  l.found = true;
  l.modules = {"layers.1.attn.q_proj"};
  l.parent = "layers.1.attn";
  l.message = "keep layers.1.attn.q_proj in FP32";
  l.probes = {{{"a", "b", "layers.1.attn.q_proj"}, "tracks", "", 11, 0},
              {{"a"}, "nonfinite", "inf at 3", NAN, 0},
              {{"layers.1.attn.q_proj"}, "tracks", "", 12, 0}};
  p.localizations = {l};
  const std::string html = render_sweep_html(s, p, {series(50, {}, true), series(50, {}, false)});
  const size_t rec = html.find("<h2>Recommendation</h2>"), table = html.find("<h2>Strategies</h2>"),
               loc = html.find("<h2>Localization: fp16-autocast-scaler</h2>"), fix = html.find("<h3>Fix</h3>"),
               generic = html.find("<h2>Scenarios</h2>");
  ASSERT_NE(rec, std::string::npos);
  ASSERT_NE(generic, std::string::npos);
  EXPECT_TRUE(rec < table && table < loc && loc < fix && fix < generic) << "the answer leads the page";
  EXPECT_NE(html.find("tracks FP32 &lt;margin 0.1&gt;"), std::string::npos) << "escaped";
  EXPECT_NE(html.find("10 / 80 / 10"), std::string::npos) << "FP32's three runs";
  EXPECT_NE(html.find("re-runs: 20 / 21 / 19 (FP32 interleaved: 10 / 80 / 10)"), std::string::npos);
  EXPECT_NE(html.find("<span class=\"warn\">not decisive</span>"), std::string::npos);
  EXPECT_NE(html.find("12.3k"), std::string::npos) << "tokens/s";
  EXPECT_NE(html.find("3 MiB"), std::string::npos) << "peak memory";
  EXPECT_NE(html.find("[9, 12]"), std::string::npos) << "the step time's spread";
  EXPECT_EQ(count(html.substr(loc, generic - loc), "<tr><td class=\"n\">"), 3u) << "a row per probe";
  EXPECT_NE(html.find("inf at 3"), std::string::npos);
  EXPECT_NE(html.find("keep_fp32(model, [&quot;layers.1.attn.q_proj&quot;])"), std::string::npos) << "the fix";
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(count(html, "http"), count(html, "http://www.w3.org/2000/svg")) << "no URL but the SVG namespace";
}

// The engine path (check --engine fast) travels through summary.json and shows in summary.md and report.html; the
// stock engine adds nothing to either.
TEST(ReportSummary, EnginePathIsWrittenReadAndShown) {
  const std::string d = dir();
  RunSummary s = sample();
  s.scenarios[0].engine = "fused head; cuda graphs uncaptured: CUDA graphs need a CUDA device (the run is on cpu)";
  s.scenarios[0].engine_plan = {
      {"model.head_loss", "fused head", "", true},
      {"model.gemm_epilogues", "GEMM epilogues", "needs a CUDA device: the run is on cpu", false}};
  s.scenarios[1].engine = "stock";
  write_run_reports(d, s);
  const RunSummary back = read_summary_json(d + "/summary.json");
  EXPECT_EQ(back.scenarios[0].engine, s.scenarios[0].engine);
  ASSERT_EQ(back.scenarios[0].engine_plan.size(), 2u);  // (v5) each option, applied or refused with the reason
  EXPECT_EQ(back.scenarios[0].engine_plan[1].option, "model.gemm_epilogues");
  EXPECT_FALSE(back.scenarios[0].engine_plan[1].applied);
  EXPECT_EQ(back.scenarios[0].engine_plan[1].note, "needs a CUDA device: the run is on cpu");
  EXPECT_TRUE(back.scenarios[0].engine_plan[0].applied);
  EXPECT_TRUE(back.scenarios[1].engine_plan.empty());
  EXPECT_EQ(back.scenarios[1].engine, "stock");
  const std::string m = slurp(d + "/summary.md");
  EXPECT_NE(
      m.find("Engine paths (not the stock engine):\n\n- fp16-autocast-scaler: fused head; cuda graphs uncaptured"),
      std::string::npos)
      << m;
  EXPECT_EQ(m.find("- clip-before-unscale: stock"), std::string::npos) << m;
  const std::string html = render_html(s, {series(50, {}, false), series(50, {}, false)});
  EXPECT_EQ(count(html, "<br>engine: "), 1u);
  EXPECT_NE(html.find("engine: fused head; cuda graphs uncaptured"), std::string::npos);
}

TEST(ReportHtml, StrategyComparisonIsRelativeToFp32OfTheSameWorkload) {
  RunSummary s = sample();
  s.scenarios[1] = s.scenarios[0];
  s.scenarios[0].name = "fp32";
  s.scenarios[0].strategy = "fp32";
  s.scenarios[0].tokens_per_s = 1000;
  s.scenarios[0].peak_memory_bytes = 400 << 20;
  s.scenarios[1].name = "bf16";
  s.scenarios[1].strategy = "bf16-autocast";
  s.scenarios[1].tokens_per_s = 2500;
  s.scenarios[1].peak_memory_bytes = 100 << 20;
  s.scenarios[1].max_deviation_bands = 0.4;
  ScenarioSummary other = s.scenarios[1];  // another workload: not compared with this fp32
  other.name = "other";
  other.workload = "gpt gpt2-124m, batch 16 x 1024";
  s.scenarios.push_back(other);
  const std::string html = render_html(s, {});
  EXPECT_NE(html.find("<td class=\"n\">2.5x</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"n\">75%</td>"), std::string::npos) << "memory saved 1 - 100/400";
  EXPECT_EQ(count(html, "data-kind=\"throughput\""), 2u) << "one comparison per workload";
  EXPECT_NE(html.find("gpt gpt2-124m, batch 16 x 1024"), std::string::npos);
}

TEST(ReportSvg, NiceTicksAndLogAxisDropNonPositiveValues) {
  EXPECT_EQ(svg::nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(svg::nice_ticks(1.3, 5.8, 4), (std::vector<double>{2, 3, 4, 5}));
  svg::LineChart c("t", "y", 10);
  c.add_line({{1.0, 10.0, 0.0, -1.0, 100.0}, "#000", 1, "", "l"});
  const std::string out = c.render("k");
  EXPECT_EQ(count(out, "<polyline class=\"series\""), 1u) << "the first two points; 0 and -1 are gaps";
  EXPECT_EQ(count(out, "<circle class=\"series\""), 1u) << "the lone last point";
}

TEST(ReportCompare, SlowdownWithinTheMeasuredNoiseIsANoteNotARegression) {
  RunSummary a = sample(), noisy = sample(), steady = sample();
  a.scenarios[0].median_step_ms = 10, a.scenarios[0].p10_step_ms = 9, a.scenarios[0].p90_step_ms = 13;
  // x1.4 in the median, but B's fast steps (p10 12 ms) are as fast as A's slow ones (p90 13 ms): run-to-run jitter
  noisy.scenarios[0].median_step_ms = 14, noisy.scenarios[0].p10_step_ms = 12, noisy.scenarios[0].p90_step_ms = 16;
  const Comparison n = compare_runs(a, noisy, {});
  EXPECT_TRUE(n.scenarios[0].regressions.empty());
  ASSERT_EQ(n.scenarios[0].notes.size(), 1u);
  EXPECT_NE(n.scenarios[0].notes[0].find("within noise"), std::string::npos);
  // x1.15 with tight spreads on both sides: a real slowdown
  a.scenarios[0].p10_step_ms = 9.95, a.scenarios[0].p90_step_ms = 10.05;
  steady.scenarios[0].median_step_ms = 11.5, steady.scenarios[0].p10_step_ms = 11.45,
  steady.scenarios[0].p90_step_ms = 11.6;
  const Comparison r = compare_runs(a, steady, {});
  ASSERT_EQ(r.scenarios[0].regressions.size(), 1u);
  EXPECT_NE(r.scenarios[0].regressions[0].find("step time x1.15"), std::string::npos);
  EXPECT_TRUE(r.regressed());
}
