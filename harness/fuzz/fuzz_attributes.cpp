// Fuzz target: attribute text from a file, from the reader to every format it reaches (docs/ROBUSTNESS.md, "Text
// from files"). The input is key\0value\0key\0value...: the attributes of an HDF5 trajectory (written with
// trajectory::write_trajectory, which stores any bytes) and of a JSON-lines header (written by hand: the bytes raw in a
// JSON string). Each file is read back; then the attributes — as read, and raw as a reader that forgot the rule would
// pass them — fill a run summary that is written as summary.json, junit.xml and summary.md, rendered as report.html,
// printed as the result table and read back as compare reads summary.json. The oracle: a reader returns attributes
// that are printable UTF-8 (io/text.h), keeps printable text unchanged and refuses an exact attribute (status,
// expect, strategy, ...) that is not, with a message naming the file and the attribute; every error names its file
// and is printable; every report is printable UTF-8 and summary.json reads back what was written.
#include "fuzz_support.h"

#include "cli/commands.h"
#include "io/files.h"
#include "io/text.h"
#include "reference/external_run.h"
#include "trajectory/trajectory_file.h"
#include "report/html.h"
#include "report/summary.h"

#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace {
using namespace ampcheck;
using Pairs = std::vector<std::pair<std::string, std::string>>;

Pairs split_pairs(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) parts.emplace_back();
    else
      parts.back().push_back(static_cast<char>(data[i]));
  }
  Pairs out;
  for (size_t i = 0; i + 1 < parts.size(); i += 2)
    if (!parts[i].empty()) out.emplace_back(parts[i], parts[i + 1]);
  return out;
}

bool printable(const std::string& s) { return io::first_unprintable(s) == std::string::npos; }
bool is_exact(const std::string& key) {
  for (const char* k : trajectory::kExactAttributes)
    if (key == k) return true;
  return false;
}
bool reserved(const std::string& key) { return key == "format" || key == "format_version" || key == "events"; }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A JSON string holding the bytes as they are (only '"', '\\' and C0 escaped): invalid UTF-8 reaches the parser.
std::string json_string_raw(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') out += std::string("\\") + c;
    else if (b < 0x20) {
      char u[8];
      std::snprintf(u, sizeof u, "\\u%04x", b);
      out += u;
    } else
      out += c;
  }
  return out + "\"";
}

// The reader's oracle: printable attributes, printable input unchanged; or a refusal naming the file (and, where exact
// attributes are not printable, one of them: the reader stops at the first it checks).
// JSON lines: bytes that are not UTF-8 anywhere in the header are a JSON syntax error (naming file:line), before any
// attribute is looked at.
void check_read(const std::function<trajectory::TrajectoryFile()>& read, const Pairs& pairs, const std::string& path,
                bool json, std::map<std::string, std::string>& attributes_read) {
  std::map<std::string, std::string> last;  // (a key given twice: the last value, as the writers keep it)
  for (const auto& [k, v] : pairs) last[k] = v;
  std::set<std::string> unprintable_exact;
  for (const auto& [k, v] : last)
    if (is_exact(k) && !reserved(k) && !printable(v)) unprintable_exact.insert(k);
  bool invalid_utf8 = false;  // (JSON: anywhere in the header, an earlier duplicate's value included)
  for (const auto& [k, v] : pairs) invalid_utf8 |= io::first_invalid_utf8(k + v) != std::string::npos;
  if (json && invalid_utf8) unprintable_exact.clear();
  try {
    const trajectory::TrajectoryFile file = read();
    const std::map<std::string, std::string> attributes = trajectory::attribute_map(file.attributes);
    struct {
      const std::map<std::string, std::string>& attributes;
      const trajectory::Trajectory& trajectory;
    } f{attributes, file.trajectory};
    FUZZ_CHECK(unprintable_exact.empty(), "an exact attribute that is not printable UTF-8 is refused");
    FUZZ_CHECK(!(json && invalid_utf8), "JSON that is not UTF-8 is refused");
    for (const auto& [k, v] : f.attributes) {
      FUZZ_CHECK(printable(k), "attribute names read are printable");
      FUZZ_CHECK(printable(v), "attribute values read are printable");
    }
    for (const auto& e : f.trajectory.events) FUZZ_CHECK(printable(e), "events read are printable");
    for (const auto& [k, v] : last)
      if (!reserved(k) && printable(k) && printable(v)) {
        const auto it = f.attributes.find(k);
        FUZZ_CHECK(it != f.attributes.end() && it->second == v, "printable text is read unchanged");
      }
    attributes_read = f.attributes;
  } catch (const std::exception& e) {
    fuzz::check_names_file(e.what(), path);
    FUZZ_CHECK(printable(e.what()), "an error message is printable");
    if (!unprintable_exact.empty()) {
      bool named = false;
      for (const auto& k : unprintable_exact)
        named = named || std::string(e.what()).find("attribute '" + k + "'") != std::string::npos;
      FUZZ_CHECK(named, "the refusal names an attribute that is not printable");
    }
  }
}

report::ScenarioSummary row_from(const std::map<std::string, std::string>& a) {
  report::ScenarioSummary row;
  auto get = [&](const char* k) {
    auto it = a.find(k);
    return it == a.end() ? std::string("-") : it->second;
  };
  row.name = a.empty() ? std::string("run") : a.begin()->first;
  row.strategy = get("strategy");
  row.expect = get("expect");
  row.verdict = get("status");
  row.workload = get("workload");
  row.trajectory_file = row.name + ".h5";
  for (const auto& [k, v] : a) {
    row.message += k + "=" + v + "; ";
    row.warnings.push_back({k, v});
  }
  return row;
}

// The reports of a summary holding these rows: printable, and summary.json reads back as written (made printable).
void check_reports(const std::vector<report::ScenarioSummary>& rows) {
  char tmpl[] = "/tmp/ampcheck-fuzz-reports-XXXXXX";
  if (!::mkdtemp(tmpl)) return;
  const std::string dir = tmpl;
  report::RunSummary s;
  s.suite = "judge";
  s.device_name = rows.empty() ? "" : rows.front().message;
  s.scenarios = rows;
  report::write_run_reports(dir, s);  // never throws on text: it is made printable on the way out
  for (const char* f : {"/summary.json", "/junit.xml", "/summary.md"})
    FUZZ_CHECK(printable(read_all(dir + f)), "every report file is printable UTF-8");
  FUZZ_CHECK(printable(report::render_html(s, std::vector<report::ScenarioSeries>(s.scenarios.size()))),
             "report.html is printable UTF-8");
  std::ostringstream terminal;
  std::streambuf* cout_buffer = std::cout.rdbuf(terminal.rdbuf());
  cli::print_result_table(s);
  std::cout.rdbuf(cout_buffer);
  FUZZ_CHECK(printable(terminal.str()), "the result table is printable");
  const report::RunSummary back = report::read_summary_json(dir + "/summary.json");
  FUZZ_CHECK(back.scenarios.size() == rows.size(), "summary.json holds every row");
  for (size_t i = 0; i < rows.size(); ++i) {
    FUZZ_CHECK(back.scenarios[i].name == io::printable_text(rows[i].name), "summary.json: the name as written");
    FUZZ_CHECK(back.scenarios[i].strategy == io::printable_text(rows[i].strategy), "summary.json: the strategy");
    FUZZ_CHECK(back.scenarios[i].message == io::printable_text(rows[i].message), "summary.json: the message");
  }
  io::remove_tree(dir);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Pairs pairs = split_pairs(data, size);
  const std::string stem = "/tmp/ampcheck-fuzz-attributes-" + std::to_string(::getpid());
  std::vector<report::ScenarioSummary> rows;

  // 1. HDF5: the attributes as write_trajectory stores them (any bytes), read back
  const std::string h5 = stem + ".h5";
  trajectory::TrajectoryFile tf;
  tf.trajectory.rows.resize(3);
  for (auto& r : tf.trajectory.rows) r.fill(1.0);
  for (const auto& [k, v] : pairs) {
    if (k == "events") {
      for (size_t b = 0, e; b <= v.size(); b = e + 1) {
        e = v.find('\n', b);
        if (e == std::string::npos) e = v.size();
        tf.trajectory.events.push_back(v.substr(b, e - b));
      }
    } else {
      tf.attributes.other[k] = v;  // any bytes, as the file stores them (the record's fields unset)
    }
  }
  bool written = true;
  try {
    trajectory::write_trajectory(h5, tf, /*overwrite=*/true);
  } catch (const std::exception&) {
    written = false;  // a name libhdf5 does not take as an attribute's: nothing to read
  }
  std::map<std::string, std::string> read_h5;
  if (written) check_read([&] { return trajectory::read_trajectory(h5); }, pairs, h5, false, read_h5);
  std::remove(h5.c_str());

  // 2. JSON lines: the same attributes in a header object, the bytes raw
  const std::string jsonl = stem + ".jsonl";
  {
    std::ofstream out(jsonl, std::ios::binary | std::ios::trunc);
    out << "{\"format\": \"ampcheck-trajectory\", \"format_version\": 1, \"attributes\": {";
    bool first = true;
    for (const auto& [k, v] : pairs)
      if (!reserved(k)) {
        out << (first ? "" : ", ") << json_string_raw(k) << ": " << json_string_raw(v);
        first = false;
      }
    out << "}}\n{\"step\": 0, \"loss\": 2.5}\n{\"step\": 1, \"loss\": 2.4}\n";
  }
  std::map<std::string, std::string> read_jsonl;
  Pairs jsonl_pairs;
  for (const auto& p : pairs)
    if (!reserved(p.first)) jsonl_pairs.push_back(p);
  check_read([&] { return reference::read_jsonl_trajectory(jsonl); }, jsonl_pairs, jsonl, true, read_jsonl);
  std::remove(jsonl.c_str());

  // 3. the reports: of what the readers returned, and of the raw bytes (a boundary missed: the writers still hold)
  if (!read_h5.empty()) rows.push_back(row_from(read_h5));
  if (!read_jsonl.empty()) rows.push_back(row_from(read_jsonl));
  std::map<std::string, std::string> raw;
  for (const auto& [k, v] : pairs) raw[k] = v;
  rows.push_back(row_from(raw));
  check_reports(rows);
  return 0;
}
