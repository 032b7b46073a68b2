// summary.json / junit.xml / summary.md.
#include "report/summary.h"

#include "report/format.h"

#include "io/files.h"
#include "io/record_json.h"
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
std::string xml_escape(const std::string& s) { return escape_markup(s); }
std::string md(const std::string& s) { return markdown_text(s); }
constexpr const char* kHint = ". HINT: pass a run directory written by `ampcheck check` (or re-run it)";
}  // namespace

// The envelope here; every other field from the record's description (visit_fields, summary.h).
void write_summary_json(const std::string& path, const RunSummary& s) {
  nlohmann::json j = io::record_to_json(s);
  j["schema"] = "ampcheck-summary";
  j["version"] = kSummaryVersion;
  j["passed"] = s.passed();
  j["failed"] = s.failed();
  j["scenarios"] = nlohmann::json::array();
  for (const auto& c : s.scenarios) j["scenarios"].push_back(io::record_to_json(c));
  io::make_json_strings_printable(j);  // the boundaries made them so already; this makes it a property of the writer
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
  io::make_json_strings_printable(j);
  if (!j.is_object() || !j.contains("schema") || j["schema"] != "ampcheck-summary")
    throw std::runtime_error(path + ": field 'schema' is not \"ampcheck-summary\"");
  const int64_t version =
      j.contains("version") && j["version"].is_number_integer() ? j["version"].get<int64_t>() : int64_t{0};
  if (version < 1 || version > kSummaryVersion)
    throw std::runtime_error(path + ": field 'version' is " +
                             io::quote_json_value(j.value("version", nlohmann::json())) + ", expected 1.." +
                             std::to_string(kSummaryVersion));
  RunSummary s;
  try {
    io::record_from_json(j, s);
  } catch (const io::FieldError& e) {
    throw std::runtime_error(path + ": " + e.what() + kHint);
  }
  const auto scenarios = j.find("scenarios");
  if (scenarios == j.end() || !scenarios->is_array())
    throw std::runtime_error(
        path + ": field 'scenarios': expected a list of scenario objects, got " +
        (scenarios == j.end() ? "nothing (the field is missing)" : io::quote_json_value(*scenarios)) + kHint);
  for (size_t i = 0; i < scenarios->size(); ++i) {
    if (!scenarios->at(i).is_object())
      throw std::runtime_error(path + ": field 'scenarios': expected scenario objects, got " +
                               io::quote_json_value(scenarios->at(i)) + " (entry " + std::to_string(i) + ")" + kHint);
    ScenarioSummary x;
    try {
      io::record_from_json(scenarios->at(i), x);
    } catch (const io::FieldError& e) {  // named by the scenario: its name where that was read (the first field)
      throw std::runtime_error(path + ": field '" + e.field + "' of scenario " +
                               (x.name.empty() ? std::to_string(i + 1) : x.name) + ": expected " + e.expected +
                               ", got " + e.got + kHint);
    }
    s.scenarios.push_back(std::move(x));
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
      << "\" time=\"" << format_number(seconds, 6) << "\">\n";
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
      << md(c.deciding_signal.empty() ? c.max_signal : c.deciding_signal) << " | " << format_number(c.first_loss)
      << " → " << format_number(c.final_loss) << " | "
      << (c.first_divergence_step >= 0 ? std::to_string(c.first_divergence_step) : "-") << " | "
      << format_number(c.max_deviation_bands, 3) << " | " << c.skipped_steps << " | "
      << format_number(c.median_step_ms, 3) << " | " << format_number(std::round(c.tokens_per_s), 7) << " | "
      << (c.pass ? "PASS" : "**FAIL**") << " |\n";
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
