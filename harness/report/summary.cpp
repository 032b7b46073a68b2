// summary.json / junit.xml / summary.md.
#include "report/summary.h"

#include "report/format.h"

#include "io/files.h"
#include "io/text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace ampcheck::report {

int64_t RunSummary::passed() const {
  int64_t n = 0;
  for (const auto& s : scenarios) n += s.pass;
  return n;
}
int64_t RunSummary::failed() const { return static_cast<int64_t>(scenarios.size()) - passed(); }

namespace {
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
double get_num(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return NAN;
  return j.at(key).get<double>();
}

std::string xml_escape(const std::string& s) { return escape_markup(s); }
std::string md(const std::string& s) { return markdown_text(s); }

// Every string of a JSON document (object keys too) made printable (io/text.h), in place: what summary.json's writer
// does before dump() (nlohmann throws type_error 316 on a string that is not UTF-8) and its reader after parse()
// (JSON may spell control characters, "\u001b").
void make_strings_printable(nlohmann::json& j) {
  if (j.is_string()) {
    auto& text = j.get_ref<std::string&>();
    if (io::first_unprintable(text) != std::string::npos) text = io::printable_text(text);
  } else if (j.is_array()) {
    for (auto& e : j) make_strings_printable(e);
  } else if (j.is_object()) {
    bool keys_printable = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      keys_printable &= io::first_unprintable(it.key()) == std::string::npos;
      make_strings_printable(it.value());
    }
    if (!keys_printable) {
      nlohmann::json renamed = nlohmann::json::object();
      for (auto it = j.begin(); it != j.end(); ++it) renamed[io::printable_text(it.key())] = std::move(it.value());
      j = std::move(renamed);
    }
  }
}

std::string fmt(double v, int prec = 4) { return report::format_number(v, prec); }
}  // namespace

void write_summary_json(const std::string& path, const RunSummary& s) {
  nlohmann::json j;
  j["schema"] = "ampcheck-summary";
  j["version"] = kSummaryVersion;
  j["ampcheck_version"] = s.ampcheck_version;
  j["libtorch_version"] = s.libtorch_version;
  j["cuda_version"] = s.cuda_version;
  j["device_name"] = s.device_name;
  j["device_class"] = s.device_class;
  j["date"] = s.date;
  j["suite"] = s.suite;
  j["git_commit"] = s.git_commit;
  j["strict"] = s.strict;
  j["passed"] = s.passed();
  j["failed"] = s.failed();
  j["scenarios"] = nlohmann::json::array();
  for (const auto& c : s.scenarios) {
    j["scenarios"].push_back({{"name", c.name},
                              {"strategy", c.strategy},
                              {"device_class", c.device_class},
                              {"expect", c.expect},
                              {"verdict", c.verdict},
                              {"pass", c.pass},
                              {"message", c.message},
                              {"steps", c.steps},
                              {"first_divergence_step", c.first_divergence_step},
                              {"max_deviation_bands", num(c.max_deviation_bands)},
                              {"final_loss_ratio", num(c.final_loss_ratio)},
                              {"param_drift", num(c.param_drift)},
                              {"skipped_steps", c.skipped_steps},
                              {"first_loss", num(c.first_loss)},
                              {"final_loss", num(c.final_loss)},
                              {"workload", c.workload},
                              {"compute_dtype", c.compute_dtype},
                              {"timing_method", c.timing_method},
                              {"warmup_steps", c.warmup_steps},
                              {"median_step_ms", num(c.median_step_ms)},
                              {"p10_step_ms", num(c.p10_step_ms)},
                              {"p90_step_ms", num(c.p90_step_ms)},
                              {"tokens_per_s", num(c.tokens_per_s)},
                              {"samples_per_s", num(c.samples_per_s)},
                              {"tflops", num(c.tflops)},
                              {"peak_tflops", num(c.peak_tflops)},
                              {"mfu", num(c.mfu)},
                              {"peak_memory_bytes", c.peak_memory_bytes},
                              {"peak_reserved_bytes", c.peak_reserved_bytes},
                              {"trajectory_file", c.trajectory_file},
                              {"engine", c.engine},
                              {"deciding_signal", c.deciding_signal},
                              {"max_signal", c.max_signal}});
    nlohmann::json plan = nlohmann::json::array();
    for (const auto& o : c.engine_plan)
      plan.push_back({{"option", o.option}, {"label", o.label}, {"applied", o.applied}, {"note", o.note}});
    j["scenarios"].back()["engine_plan"] = plan;
    if (!c.validation.mode.empty()) {
      const auto& v = c.validation;
      j["scenarios"].back()["validation"] = {{"mode", v.mode},
                                             {"golden", v.golden},
                                             {"golden_class", v.golden_class},
                                             {"stack_differences", v.stack_differences},
                                             {"identical", v.identical},
                                             {"first_step", v.first_step},
                                             {"first_difference", v.first_difference},
                                             {"replay", v.replay},
                                             {"replay_message", v.replay_message},
                                             {"reference_class", v.reference_class},
                                             {"statistical_verdict", v.statistical_verdict},
                                             {"plants", v.plants}};
    }
    nlohmann::json sig = nlohmann::json::array();
    for (const auto& g : c.signals)
      sig.push_back({{"name", g.name},
                     {"unit", g.unit},
                     {"judged", g.judged},
                     {"fired", g.fired},
                     {"decides", g.decides},
                     {"verdict", g.verdict},
                     {"first_step", g.first_step},
                     {"max_step", g.max_step},
                     {"max_margin", num(g.max_margin)},
                     {"deviation", num(g.deviation)},
                     {"allowed", num(g.allowed)},
                     {"noise", num(g.noise)},
                     {"run_value", num(g.run_value)},
                     {"reference_value", num(g.reference_value)},
                     {"message", g.message}});
    j["scenarios"].back()["signals"] = sig;
    nlohmann::json warn = nlohmann::json::array();
    for (const auto& w : c.warnings) warn.push_back({{"signal", w.signal}, {"message", w.message}});
    j["scenarios"].back()["warnings"] = warn;
    if (c.distributed.world_size > 0) {
      const auto& d = c.distributed;
      nlohmann::json ms = nlohmann::json::array(), share = nlohmann::json::array();
      for (double v : d.rank_median_step_ms) ms.push_back(num(v));
      for (double v : d.rank_collective_share) share.push_back(num(v));
      j["scenarios"].back()["distributed"] = {{"world_size", d.world_size},
                                              {"backend", d.backend},
                                              {"sharding", d.sharding},
                                              {"reduce_dtype", d.reduce_dtype},
                                              {"launch", d.launch},
                                              {"rank_files", d.rank_files},
                                              {"rank_median_step_ms", ms},
                                              {"rank_collective_share", share},
                                              {"consistency_checks", d.consistency_checks},
                                              {"diverged_step", d.diverged_step},
                                              {"consistency", d.consistency}};
    }
  }
  make_strings_printable(j);  // the boundaries made them so already; this makes it a property of the writer
  io::write_file_atomically(path, j.dump(2) + "\n");
}

RunSummary read_summary_json(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error(path +
                             ": cannot open run summary. HINT: pass a run directory written by `ampcheck check`");
  nlohmann::json j;
  try {
    std::stringstream text;
    text << in.rdbuf();
    j = nlohmann::json::parse(text.str());  // the whole file: trailing bytes after the object are an error
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not JSON: " + io::printable_text(e.what()));  // (it may quote the bytes read)
  }
  make_strings_printable(j);
  if (!j.is_object() || !j.contains("schema") || j["schema"] != "ampcheck-summary")
    throw std::runtime_error(path + ": field 'schema' is not \"ampcheck-summary\"");
  const int64_t version =
      j.contains("version") && j["version"].is_number_integer() ? j["version"].get<int64_t>() : int64_t{0};
  if (version < 1 || version > kSummaryVersion)
    throw std::runtime_error(path + ": field 'version' is " +
                             io::printable_text(j.value("version", nlohmann::json(nullptr)).dump()) + ", expected 1.." +
                             std::to_string(kSummaryVersion));
  RunSummary s;
  try {
    s.ampcheck_version = j.value("ampcheck_version", "");
    s.libtorch_version = j.value("libtorch_version", "");
    s.cuda_version = j.value("cuda_version", "");
    s.device_name = j.value("device_name", "");
    s.device_class = j.value("device_class", "");
    s.date = j.value("date", "");
    s.suite = j.value("suite", "");
    s.git_commit = j.value("git_commit", "");
    s.strict = j.value("strict", false);
    for (const auto& c : j.at("scenarios")) {
      ScenarioSummary x;
      x.name = c.at("name").get<std::string>();
      x.strategy = c.value("strategy", "");
      x.device_class = c.value("device_class", "");
      x.expect = c.at("expect").get<std::string>();
      x.verdict = c.at("verdict").get<std::string>();
      x.pass = c.at("pass").get<bool>();
      x.message = c.value("message", "");
      x.steps = c.value("steps", int64_t{0});
      x.first_divergence_step = c.value("first_divergence_step", int64_t{-1});
      x.max_deviation_bands = get_num(c, "max_deviation_bands");
      x.final_loss_ratio = get_num(c, "final_loss_ratio");
      x.param_drift = get_num(c, "param_drift");
      x.skipped_steps = c.value("skipped_steps", int64_t{0});
      x.first_loss = get_num(c, "first_loss");
      x.final_loss = get_num(c, "final_loss");
      x.workload = c.value("workload", "");
      x.compute_dtype = c.value("compute_dtype", "");
      x.timing_method = c.value("timing_method", "");
      x.warmup_steps = c.value("warmup_steps", int64_t{0});
      x.median_step_ms = get_num(c, "median_step_ms");
      x.p10_step_ms = get_num(c, "p10_step_ms");
      x.p90_step_ms = get_num(c, "p90_step_ms");
      x.tokens_per_s = get_num(c, "tokens_per_s");
      x.samples_per_s = get_num(c, "samples_per_s");
      x.tflops = get_num(c, "tflops");
      x.peak_tflops = get_num(c, "peak_tflops");
      x.mfu = get_num(c, "mfu");
      x.peak_memory_bytes = c.value("peak_memory_bytes", int64_t{0});
      x.peak_reserved_bytes = c.value("peak_reserved_bytes", int64_t{0});
      x.trajectory_file = c.value("trajectory_file", "");
      x.engine = c.value("engine", "");
      if (c.contains("engine_plan") && c.at("engine_plan").is_array())
        for (const auto& o : c.at("engine_plan")) {
          if (!o.is_object())
            throw std::runtime_error(path + ": field 'engine_plan' of scenario " + x.name +
                                     ": expected {option, label, applied, note} objects, got " +
                                     io::printable_text(o.dump()));
          x.engine_plan.push_back(
              {o.value("option", ""), o.value("label", ""), o.value("note", ""), o.value("applied", false)});
        }
      x.deciding_signal = c.value("deciding_signal", "");
      x.max_signal = c.value("max_signal", "");
      if (c.contains("validation")) {
        const auto& vj = c.at("validation");
        if (!vj.is_object())
          throw std::runtime_error(path + ": field 'validation' of scenario " + x.name + " must be an object");
        auto& v = x.validation;
        v.mode = vj.value("mode", "");
        v.golden = vj.value("golden", "");
        v.golden_class = vj.value("golden_class", "");
        v.stack_differences = vj.value("stack_differences", "");
        v.identical = vj.value("identical", false);
        v.first_step = vj.value("first_step", int64_t{-1});
        v.first_difference = vj.value("first_difference", "");
        v.replay = vj.value("replay", "");
        v.replay_message = vj.value("replay_message", "");
        v.reference_class = vj.value("reference_class", "");
        v.statistical_verdict = vj.value("statistical_verdict", "");
        v.plants = vj.value("plants", "");
      }
      if (c.contains("distributed")) {
        const auto& dj = c.at("distributed");
        auto& d = x.distributed;
        d.world_size = dj.value("world_size", int64_t{0});
        d.backend = dj.value("backend", "");
        d.sharding = dj.value("sharding", "");
        d.reduce_dtype = dj.value("reduce_dtype", "");
        d.launch = dj.value("launch", "");
        d.rank_files = dj.value("rank_files", "");
        for (const auto& v : dj.value("rank_median_step_ms", nlohmann::json::array()))
          d.rank_median_step_ms.push_back(v.is_number() ? v.get<double>() : NAN);
        for (const auto& v : dj.value("rank_collective_share", nlohmann::json::array()))
          d.rank_collective_share.push_back(v.is_number() ? v.get<double>() : NAN);
        d.consistency_checks = dj.value("consistency_checks", int64_t{0});
        d.diverged_step = dj.value("diverged_step", int64_t{-1});
        d.consistency = dj.value("consistency", "");
      }
      if (c.contains("signals"))
        for (const auto& g : c.at("signals")) {
          SignalSummary y;
          y.name = g.at("name").get<std::string>();
          y.unit = g.value("unit", "");
          y.judged = g.value("judged", false);
          y.fired = g.value("fired", false);
          y.decides = g.value("decides", true);
          y.verdict = g.value("verdict", "");
          y.first_step = g.value("first_step", int64_t{-1});
          y.max_step = g.value("max_step", int64_t{-1});
          y.max_margin = get_num(g, "max_margin");
          y.deviation = get_num(g, "deviation");
          y.allowed = get_num(g, "allowed");
          y.noise = get_num(g, "noise");
          y.run_value = get_num(g, "run_value");
          y.reference_value = get_num(g, "reference_value");
          y.message = g.value("message", "");
          x.signals.push_back(y);
        }
      if (c.contains("warnings"))
        for (const auto& w : c.at("warnings"))
          x.warnings.push_back({w.at("signal").get<std::string>(), w.value("message", "")});
      s.scenarios.push_back(x);
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": bad field: " + e.what());
  }
  return s;
}

void write_junit(const std::string& path, const RunSummary& s) {
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x << "<testsuites name=\"ampcheck\" tests=\"" << s.scenarios.size() << "\" failures=\"" << s.failed() << "\">\n";
  x << "  <testsuite name=\"ampcheck." << xml_escape(s.suite.empty() ? "scenarios" : s.suite) << "\" tests=\""
    << s.scenarios.size() << "\" failures=\"" << s.failed() << "\" timestamp=\"" << xml_escape(s.date) << "\">\n";
  x << "    <properties>\n"
    << "      <property name=\"device\" value=\"" << xml_escape(s.device_name + " (" + s.device_class + ")") << "\"/>\n"
    << "      <property name=\"libtorch\" value=\"" << xml_escape(s.libtorch_version) << "\"/>\n"
    << "    </properties>\n";
  for (const auto& c : s.scenarios) {
    const double seconds = std::isfinite(c.median_step_ms) ? c.median_step_ms * c.steps / 1000.0 : 0.0;
    x << "    <testcase classname=\"ampcheck." << xml_escape(c.device_class) << "\" name=\"" << xml_escape(c.name)
      << "\" time=\"" << fmt(seconds, 6) << "\">\n";
    if (!c.warnings.empty()) {  // a non-failing note: properties CI viewers list, and the text in system-out
      x << "      <properties>\n";
      for (const auto& w : c.warnings)
        x << "        <property name=\"ampcheck.warning." << xml_escape(w.signal) << "\" value=\""
          << xml_escape(w.message) << "\"/>\n";
      x << "      </properties>\n";
    }
    if (!c.pass)
      x << "      <failure message=\"expected " << xml_escape(c.expect) << ", got " << xml_escape(c.verdict) << "\">"
        << xml_escape(c.message) << "</failure>\n";
    std::string out = c.verdict + ": " + c.message;
    for (const auto& w : c.warnings) out += "\nwarning (" + w.signal + "): " + w.message;
    x << "      <system-out>" << xml_escape(out) << "</system-out>\n";
    x << "    </testcase>\n";
  }
  x << "  </testsuite>\n</testsuites>\n";
  io::write_file_atomically(path, x.str());
}

void write_markdown(const std::string& path, const RunSummary& s) {
  std::ostringstream m;
  m << "### ampcheck: " << s.passed() << " passed, " << s.failed() << " failed"
    << (s.suite.empty() ? "" : " (suite `" + md(s.suite) + "`)") << "\n\n"
    << md(s.device_name) << " (" << md(s.device_class) << "), LibTorch " << md(s.libtorch_version)
    << (s.cuda_version.empty() ? "" : ", CUDA " + md(s.cuda_version)) << ", " << md(s.date)
    << (s.git_commit.empty() ? "" : ", commit " + md(s.git_commit))
    << ". Charts: report.html in the run directory.\n\n";
  // `ampcheck validate` rows: a mode column (bitwise | statistical: how the row was decided)
  const bool validation = std::any_of(s.scenarios.begin(), s.scenarios.end(),
                                      [](const ScenarioSummary& c) { return !c.validation.mode.empty(); });
  m << "| scenario | strategy | expect | " << (validation ? "mode | " : "")
    << "verdict | signal | loss first → last | from step | max margin | skipped | ms/step | tokens/s | result |\n"
    << "| --- | --- | --- | " << (validation ? "--- | " : "")
    << "--- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& c : s.scenarios)
    m << "| " << md(c.name) << " | " << md(c.strategy) << " | " << md(c.expect) << " | "
      << (validation ? (c.validation.mode.empty() ? "-" : md(c.validation.mode)) + " | " : "") << md(c.verdict) << " | "
      << md(c.deciding_signal.empty() ? c.max_signal : c.deciding_signal) << " | " << fmt(c.first_loss) << " → "
      << fmt(c.final_loss) << " | " << (c.first_divergence_step >= 0 ? std::to_string(c.first_divergence_step) : "-")
      << " | " << fmt(c.max_deviation_bands, 3) << " | " << c.skipped_steps << " | " << fmt(c.median_step_ms, 3)
      << " | " << fmt(std::round(c.tokens_per_s), 7) << " | " << (c.pass ? "PASS" : "**FAIL**") << " |\n";
  bool any_engine = false;  // runs on an engine option (check --engine fast): which, and where it was refused
  for (const auto& c : s.scenarios)
    if (!c.engine.empty() && c.engine != "stock") {
      if (!any_engine) m << "\nEngine paths (not the stock engine):\n\n";
      any_engine = true;
      m << "- " << md(c.name) << ": " << md(c.engine) << "\n";
    }
  bool any_warning = false;
  for (const auto& c : s.scenarios)
    for (const auto& w : c.warnings) {
      if (!any_warning)
        m << "\nWarnings ("
          << (s.strict ? "--strict: they fail their scenario" : "they do not fail a scenario; --strict makes them")
          << "):\n\n";
      any_warning = true;
      m << "- " << md(c.name) << " · `" << md(w.signal) << "`: " << md(w.message) << "\n";
    }
  bool any_fail = false;
  for (const auto& c : s.scenarios)
    if (!c.pass) {
      if (!any_fail) m << "\nFailures:\n\n";
      any_fail = true;
      m << "- **" << md(c.name) << "**: " << md(c.message) << "\n";
    }
  io::write_file_atomically(path, m.str());
}

void write_run_reports(const std::string& dir, const RunSummary& s) {
  write_summary_json(dir + "/summary.json", s);
  write_junit(dir + "/junit.xml", s);
  write_markdown(dir + "/summary.md", s);
}

}  // namespace ampcheck::report
