// Strict YAML -> Scenario: the scenario's text (its top level, tolerance:, expect:, the cross-field rules), each other
// part parsed in its own room (parsing.h).
#include "scenario/scenario.h"

#include "scenario/parsing.h"

#include "inject/injection.h"
#include "io/text.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

namespace ampcheck::scenario {

namespace parsing {
// parse_injections.cpp
void parse_injections(Fields& top, const engine::RunConfig& run, std::vector<inject::InjectionConfig>& out);
}  // namespace parsing

namespace {

using namespace parsing;

// A scenario is YAML, which is UTF-8 text: a byte that is not (a Latin-1 'é' saved by an old editor) is refused
// before parsing, naming the line, the column and the field the line sets, never carried into a report.
void check_utf8(const std::string& text, const std::string& path) {
  const size_t bad = io::first_invalid_utf8(text);
  if (bad == std::string::npos) return;
  const size_t begin = text.rfind('\n', bad) == std::string::npos ? 0 : text.rfind('\n', bad) + 1;
  const std::string line = text.substr(begin, text.find('\n', bad) - begin);
  const size_t key_begin = line.find_first_not_of(" -");
  const size_t colon = line.find(':');
  std::string field;
  if (key_begin != std::string::npos && colon != std::string::npos && colon > key_begin && begin + colon < bad)
    field = line.substr(key_begin, colon - key_begin);
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[bad]));
  throw ScenarioError(path + ":" + io::line_and_column(text, bad) + ": " + (field.empty() ? "" : field + ": ") +
                      "byte " + hex + " is not UTF-8 (the line reads '" + line +
                      "'); a scenario is YAML, which is "
                      "UTF-8 text. HINT: save the file as UTF-8 (iconv -f latin1 -t utf-8)");
}

Scenario parse_scenario_text(const std::string& text, const std::string& path) {
  check_utf8(text, path);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's own limit on nesting (its message is "bad file")
    throw ScenarioError(path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                        ": nested too deeply (more than yaml-cpp's " + std::to_string(e.depth()) +
                        " parser levels); a scenario is a few levels deep");
  } catch (const YAML::ParserException& e) {
    throw ScenarioError(path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                        ": YAML syntax error: " + e.msg);
  }
  Scenario sc;
  sc.path = path;
  sc.text = text;
  Fields top(root, path, "");
  sc.run.name = top.str("name", "");
  if (sc.run.name.empty()) top.fail(root, "name: required");
  // the name names the scenario's result files in the run directory (<name>.h5): a plain file name only
  const bool plain =
      sc.run.name != "." && sc.run.name != ".." && std::none_of(sc.run.name.begin(), sc.run.name.end(), [](char ch) {
        return ch == '/' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20;
      });
  if (!plain)
    top.fail_key("name", "'" + sc.run.name +
                             "' is not a plain file name (expected no '/', '\\' or control "
                             "characters, not '.' or '..'): it names the scenario's files in the run directory");
  if (sc.run.name.size() > kMaxNameBytes)
    top.fail_key("name", std::to_string(sc.run.name.size()) + " bytes, longer than the limit of " +
                             std::to_string(kMaxNameBytes) +
                             " (it names the scenario's files, <name>.h5 and their "
                             "temporaries <name>.h5.tmp.<pid>, which must fit the file system's 255). HINT: shorten "
                             "it; `why:` is the place for a sentence");
  sc.why = top.str("why", "");
  if (sc.why.empty()) top.fail(root, "why: required (one sentence: what this scenario shows)");
  sc.device = top.choice("device", "auto", {"auto", "cpu", "cuda"});
  sc.run.seed = top.get<uint64_t>("seed", sc.run.seed, "an unsigned integer");
  if (top.has("model")) parse_model(top.map("model"), sc.run.model);
  else
    top.raw("model");
  if (top.has("data")) parse_data(top.map("data"), sc.run.data, models::resolve_preset(sc.run.model));
  else
    top.raw("data");
  if (top.has("optimizer")) parse_optimizer(top.map("optimizer"), sc.run.optimizer);
  else
    top.raw("optimizer");
  if (top.has("schedule")) parse_schedule(top.map("schedule"), sc.run.schedule);
  else
    top.raw("schedule");
  if (top.has("train")) parse_loop(top.map("train"), sc.run.loop);
  else
    top.raw("train");
  parse_strategy(top, sc.run.strategy);
  if (top.has("distributed")) parse_distributed(top.map("distributed"), sc.run);
  else
    top.raw("distributed");
  std::vector<inject::InjectionConfig> injections;
  parse_injections(top, sc.run, injections);
  inject::set_injections(sc.run, std::move(injections));
  sc.tolerance = verdict::default_tolerance();
  if (top.has("tolerance")) {
    Fields t = top.map("tolerance");
    sc.tolerance.k = t.num("k", sc.tolerance.k);
    sc.tolerance.window = t.bounded("window", sc.tolerance.window, kMaxSteps, "steps: as train.steps");
    sc.tolerance.ratio_floor = t.num("ratio_floor", sc.tolerance.ratio_floor);
    sc.tolerance.fraction_floor = t.num("fraction_floor", sc.tolerance.fraction_floor);
    sc.tolerance.max_skipped_fraction = t.num("max_skipped_fraction", sc.tolerance.max_skipped_fraction);
    sc.tolerance.fp8_saturated_floor = t.num("fp8_saturated_floor", sc.tolerance.fp8_saturated_floor);
    sc.tolerance.fp8_flushed_floor = t.num("fp8_flushed_floor", sc.tolerance.fp8_flushed_floor);
    if (!(sc.tolerance.fp8_saturated_floor > 0 && sc.tolerance.fp8_saturated_floor < 1))
      t.fail_key("fp8_saturated_floor", "must be in (0, 1)");
    if (!(sc.tolerance.fp8_flushed_floor > 0 && sc.tolerance.fp8_flushed_floor < 1))
      t.fail_key("fp8_flushed_floor", "must be in (0, 1)");
    if (!(sc.tolerance.k > 0)) t.fail_key("k", "must be > 0");
    if (!(sc.tolerance.ratio_floor > 1)) t.fail_key("ratio_floor", "must be > 1 (a ratio such as 1.05)");
    if (!(sc.tolerance.fraction_floor > 0 && sc.tolerance.fraction_floor < 1))
      t.fail_key("fraction_floor", "must be in (0, 1)");
    if (!(sc.tolerance.max_skipped_fraction >= 0 && sc.tolerance.max_skipped_fraction <= 1))
      t.fail_key("max_skipped_fraction", "must be in [0, 1]");
    t.done();
  } else {
    top.raw("tolerance");
  }
  if (top.has("expect")) {
    Fields e = top.map("expect");
    sc.expect.verdict = e.choice("verdict", verdict::to_string(verdict::Kind::Tracks), verdict::kind_words());
    sc.expect.error = e.str("error", "");
    YAML::Node skipped = e.raw("skipped");
    if (skipped.IsDefined() && !skipped.IsNull()) {
      if (!skipped.IsSequence() || skipped.size() != 2)
        e.fail(skipped, "expect.skipped: expected [min, max] skipped steps");
      sc.expect.skipped_min = skipped[0].as<int64_t>();
      sc.expect.skipped_max = skipped[1].as<int64_t>();
    }
    YAML::Node warnings = e.raw("warnings");
    if (warnings.IsDefined() && !warnings.IsNull()) {
      const std::set<std::string> known = {"zero_grads",  "subnormal_grads", "fp8_saturated",
                                           "fp8_flushed", "not_judged",      "precision"};
      if (!warnings.IsSequence()) e.fail(warnings, "expect.warnings: expected a list of warning signals");
      for (size_t j = 0; j < warnings.size(); ++j) {
        const std::string field = "warnings[" + std::to_string(j) + "]";
        if (!warnings[j].IsScalar() || !known.count(warnings[j].Scalar()))
          e.fail_at(warnings[j], field,
                    "expected one of zero_grads, subnormal_grads, fp8_saturated, fp8_flushed, "
                    "not_judged, precision, got " +
                        Fields::describe(warnings[j]));
        sc.expect.warnings.push_back(warnings[j].Scalar());
      }
    }
    if (verdict::is(sc.expect.verdict, verdict::Kind::Error) && sc.expect.error.empty())
      e.fail_key("verdict", "verdict 'error' needs expect.error: the message");
    if (!verdict::is(sc.expect.verdict, verdict::Kind::Error) && !sc.expect.error.empty())
      e.fail_key("error", "only verdict 'error' takes a message");
    e.done();
  } else {
    top.raw("expect");
  }
  // cross-field checks
  if (sc.run.loop.unscale_each_micro_batch && sc.run.strategy.scaler.kind == engine::ScalerKind::None)
    top.fail(root, "train.unscale_each_micro_batch: needs a loss scaler (strategy.scaler)");
  if (sc.run.optimizer.fused && sc.run.optimizer.kind != "adamw") top.fail(root, "optimizer.fused: only adamw");
  if (sc.run.strategy.fp8) {  // at::_scaled_mm: every matmul dimension a multiple of 16
    const models::ModelConfig m = models::resolve_preset(sc.run.model);
    if (m.kind == "mlp")
      top.fail(root, "strategy.fp8: FP8 matmuls are sites of the gpt and llama models; the mlp has none");
    const int64_t seq = sc.run.data.seq_len > 0 ? sc.run.data.seq_len : m.block_size;
    const int64_t rows = sc.run.data.batch_size * seq / std::max<int64_t>(1, sc.run.distributed.world_size);
    const bool head = sc.run.strategy.fp8->layers != "blocks";
    if (head && m.head_loss != models::HeadLoss::Stock)
      top.fail(root, "model.head_loss: " + std::string(models::head_loss_name(m.head_loss)) +
                         " computes the LM head itself; strategy.fp8.layers " + sc.run.strategy.fp8->layers +
                         " puts it in FP8 (use layers: blocks, or head_loss: stock)");
    const bool llama = m.kind == "llama";  // its k/v_proj are n_kv_head x head size wide, its MLP mlp_hidden
    const int64_t kv = llama ? m.n_kv_head * (m.n_embd / m.n_head) : 16, hidden = llama ? m.mlp_hidden : 16;
    if (m.n_embd % 16 != 0 || rows % 16 != 0 || (head && m.vocab_size % 16 != 0) || kv % 16 != 0 || hidden % 16 != 0)
      top.fail(root,
               "strategy.fp8: at::_scaled_mm needs every matmul dimension to be a multiple of 16: n_embd " +
                   std::to_string(m.n_embd) + ", batch x seq_len per rank " + std::to_string(rows) +
                   (head ? ", vocab " + std::to_string(m.vocab_size) : std::string()) +
                   (llama ? ", n_kv_head x head size " + std::to_string(kv) + ", mlp_hidden " + std::to_string(hidden)
                          : std::string()));
  }
  top.done();
  return sc;
}

}  // namespace

Scenario parse_scenario(const std::string& text, const std::string& path) {
  try {
    return parse_scenario_text(text, path);
  } catch (const ScenarioError& e) {  // a message may quote a value or key of the file: printable (io/text.h)
    if (io::first_unprintable(e.what()) == std::string::npos) throw;
    throw ScenarioError(io::printable_text(e.what()));
  } catch (const YAML::Exception& e) {  // a value yaml-cpp cannot convert where the fields read it (e.g. in a list)
    throw ScenarioError(io::printable_text(path + ":" + std::to_string(e.mark.line + 1) + ":" +
                                           std::to_string(e.mark.column + 1) +
                                           ": a value of the wrong type (yaml-cpp: " + e.msg + ")"));
  }
}

verdict::Expectation expectation(const Expect& e) {
  verdict::Expectation x;
  x.verdict = e.verdict;
  x.error = e.error;
  x.skipped_min = e.skipped_min;
  x.skipped_max = e.skipped_max;
  x.warnings = e.warnings;
  return x;
}

Scenario load_scenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ScenarioError(path + ": cannot open scenario file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_scenario(ss.str(), path);
}

std::vector<std::string> load_suite(const std::string& scenarios_dir, const std::string& suite) {
  const std::string path = scenarios_dir + "/suites/" + suite + ".yaml";
  std::ifstream in(path);
  if (!in) throw ScenarioError(path + ": no such suite '" + suite + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(ss.str());
  } catch (const YAML::Exception& e) {
    throw ScenarioError(path + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
  Fields f(root, path, "");
  f.str("why", "");
  YAML::Node list = f.raw("scenarios");
  if (!list.IsSequence()) f.fail(root, "scenarios: expected a list of scenario files");
  std::vector<std::string> out;
  for (const auto& s : list) out.push_back(scenarios_dir + "/" + s.as<std::string>());
  f.done();
  return out;
}

}  // namespace ampcheck::scenario
