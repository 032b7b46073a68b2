// External runs: the JSON-lines reader and the choice by extension (external_run.h).
#include "reference/external_run.h"

#include "io/text.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

namespace ampcheck::reference {

namespace {
std::string known_columns() {
  std::string s;
  for (int c = 0; c < trajectory::kNumColumns; ++c) s += (c ? ", " : "") + std::string(trajectory::column_name(c));
  return s;
}
int column_index(const std::string& name) {
  for (int c = 0; c < trajectory::kNumColumns; ++c)
    if (name == trajectory::column_name(c)) return c;
  return -1;
}
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
// Limits on a JSON-lines file (resource limits on input): a line past kMaxLineBytes or more than kMaxSteps lines end
// the read with an error naming the file and line, in bounded memory.
constexpr size_t kMaxLineBytes = 4u << 20;
constexpr int64_t kMaxSteps = 10'000'000;

// std::getline with a bound: false at the end of the input; `too_long` when the line passed `max` bytes (the rest of
// it is not read).
bool read_line_bounded(std::istream& in, std::string& line, size_t max, bool& too_long) {
  line.clear();
  too_long = false;
  bool any = false;
  for (int c; (c = in.get()) != EOF;) {
    any = true;
    if (c == '\n') return true;
    if (line.size() >= max) {
      too_long = true;
      return true;
    }
    line.push_back(static_cast<char>(c));
  }
  return any;
}
}  // namespace

trajectory::TrajectoryFile read_jsonl_trajectory(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  trajectory::TrajectoryFile out;
  std::set<std::string> present;
  std::string text;
  int64_t line_no = 0;
  bool header_allowed = true;
  bool too_long = false;
  while (read_line_bounded(in, text, kMaxLineBytes, too_long)) {
    ++line_no;
    if (too_long)
      throw std::runtime_error(path + ":" + std::to_string(line_no) + ": a line longer than " +
                               std::to_string(kMaxLineBytes >> 20) + " MiB; expected one step's object per line");
    if (line_no > kMaxSteps + 1)
      throw std::runtime_error(path + ":" + std::to_string(line_no) + ": more than " + std::to_string(kMaxSteps) +
                               " steps (lines); a trajectory is bounded to keep judging it in bounded time and memory");
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
      // (nlohmann's message quotes the bytes it last read: printable, as any text from the file)
      throw std::runtime_error(where + "not JSON (" + io::printable_text(e.what()) + "); expected one object per line");
    }
    if (!j.is_object()) throw std::runtime_error(where + "expected a JSON object, got " + io::printable_text(j.dump()));
    if (j.contains("format")) {  // the header
      if (!header_allowed) throw std::runtime_error(where + "a header object is only allowed on the first line");
      if (j["format"] != kTrajectoryFormatName)
        throw std::runtime_error(where + "'format' is " + io::printable_text(j["format"].dump()) + ", expected \"" +
                                 kTrajectoryFormatName + "\"");
      if (!j.contains("format_version") || j["format_version"] != trajectory::kTrajectoryFormatVersion)
        throw std::runtime_error(where + "'format_version' is " +
                                 io::printable_text(j.value("format_version", nlohmann::json()).dump()) +
                                 ", expected " + std::to_string(trajectory::kTrajectoryFormatVersion));
      if (j.contains("attributes")) {
        if (!j["attributes"].is_object()) throw std::runtime_error(where + "'attributes' must be an object of strings");
        std::map<std::string, std::string> attributes;
        for (auto& [k, v] : j["attributes"].items()) {
          if (!v.is_string())
            throw std::runtime_error(where + "attributes." + io::printable_text(k) + " must be a string, got " +
                                     io::printable_text(v.dump()));
          attributes[k] = v.get<std::string>();
        }
        trajectory::make_attributes_printable(attributes,
                                              where.substr(0, where.size() - 2));  // (JSON: UTF-8; controls: \u001b)
        out.attributes = trajectory::parse_run_attributes(attributes, where.substr(0, where.size() - 2));
      }
      header_allowed = false;
      continue;
    }
    header_allowed = false;
    const int64_t step = out.trajectory.size();
    std::array<double, trajectory::kNumColumns> row;
    row.fill(std::numeric_limits<double>::quiet_NaN());
    for (auto& [key, v] : j.items()) {
      if (key == "step") {
        if (!v.is_number_integer() || v.get<int64_t>() != step)
          throw std::runtime_error(where + "'step' is " + io::printable_text(v.dump()) + ", expected " +
                                   std::to_string(step) + " (one line per step, in order from 0)");
        continue;
      }
      const int c = column_index(key);
      if (c < 0)
        throw std::runtime_error(where + "unknown column '" + io::printable_text(key) + "' (known: step, " +
                                 known_columns() + ")");
      if (v.is_null()) continue;  // NaN: not measured at this step (or non-finite, which JSON cannot spell)
      if (!v.is_number())
        throw std::runtime_error(where + "'" + key + "' must be a number or null, got " + io::printable_text(v.dump()));
      row[c] = v.get<double>();
      present.insert(key);
    }
    if (!j.contains("loss")) throw std::runtime_error(where + "'loss' is required on every step (a number, or null)");
    out.trajectory.rows.push_back(row);
  }
  if (out.trajectory.rows.empty()) throw std::runtime_error(path + ": no steps (expected one JSON object per step)");
  for (int c = 0; c < trajectory::kNumColumns; ++c)
    if (c == trajectory::kLoss || present.count(trajectory::column_name(c)))
      out.columns_present.push_back(trajectory::column_name(c));
  if (!out.attributes.format) out.attributes.format = kTrajectoryFormatName;
  if (!out.attributes.format_version)
    out.attributes.format_version = std::to_string(trajectory::kTrajectoryFormatVersion);
  return out;
}

void check_same_training(const trajectory::TrajectoryFile& run, const std::string& run_path,
                         const trajectory::TrajectoryFile& ref, const std::string& ref_path) {
  using Text = trajectory::RunAttributes::Text;
  // what must agree where both files say it (docs/TRAJECTORY_FORMAT.md, "Provenance")
  const std::pair<const char*, Text trajectory::RunAttributes::*> same_training[] = {
      {"run_key", &trajectory::RunAttributes::run_key},
      {"model", &trajectory::RunAttributes::model},
      {"model_parameters", &trajectory::RunAttributes::model_parameters},
      {"dataset", &trajectory::RunAttributes::dataset},
      {"reference_key", &trajectory::RunAttributes::reference_key}};
  for (const auto& [key, field] : same_training) {
    const std::string a = trajectory::text_or(run.attributes.*field), b = trajectory::text_or(ref.attributes.*field);
    if (a.empty() || b.empty()) continue;
    if (a != b)
      throw std::runtime_error(run_path + ": attribute '" + key + "' is '" + a + "', " + ref_path + " has '" + b +
                               "': not the same training (mismatched provenance). HINT: judge "
                               "a run against a reference built from FP32 runs of the same model, data and steps");
  }
}

void check_noise_runs_are_noise(const std::vector<trajectory::LabelledTrajectory>& noise,
                                const trajectory::Trajectory& base, const std::string& path) {
  for (const auto& nr : noise) {
    const bool seed = nr.label.rfind("seed", 0) == 0, order = nr.label.rfind("order", 0) == 0;
    if (!seed && !order) continue;
    const auto& a = nr.trajectory.rows;
    const auto& b = base.rows;
    if (a.size() != b.size() || a.empty()) continue;
    bool identical = true;
    for (size_t s = 0; s < a.size() && identical; ++s)
      for (size_t c = 0; c < a[s].size() && identical; ++c)  // what the training computed; the step time is not
        identical = c == trajectory::kStepTimeMs || std::memcmp(&a[s][c], &b[s][c], sizeof(double)) == 0;
    if (!identical) continue;
    throw std::runtime_error(
        path + ": noise run '" + nr.label + "' is bit-identical to the FP32 run at every step (" +
        std::to_string(a.size()) + " steps): " + (seed ? "the other init seed" : "the other data order") +
        " never reached the training, so it measures no noise and every allowed deviation would rest on the other "
        "runs alone. HINT: " +
        (seed ? "the script must take its seed from the recorder or the sweep's plan: seed after creating the "
                "Recorder / integration (plain loop: torch.manual_seed(SEED) where SEED comes from the command line "
                "or AMPCHECK_PLAN; HF Trainer: TrainingArguments(seed=...); Lightning: seed_everything(...)), or "
                "record the seed run by changing the script's own seed"
              : "pass the data order's seed to the sampler / data loader (HF TrainingArguments(data_seed=...)), "
                "then record the order run again") +
        ", and rebuild the reference");
  }
}

trajectory::TrajectoryFile read_external_run(const std::string& path, bool contained) {
  if (ends_with(path, ".jsonl")) return read_jsonl_trajectory(path);
  if (!contained) return trajectory::read_trajectory(path, trajectory::Columns::LossRequired);  // a file we wrote
  return trajectory::read_trajectory_contained(
      path,
      trajectory::Columns::LossRequired);  // a file from outside: read where a crash is contained
}

}  // namespace ampcheck::reference
