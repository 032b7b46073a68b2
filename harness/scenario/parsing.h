// Internal to harness/scenario: the strict YAML reader every part of a scenario is parsed with, and the parsers of
// the parts, one room each — parse_model.cpp (model:, data:), parse_training.cpp (optimizer:, schedule:, train:,
// distributed:), parse_strategy.cpp (strategy:), parse_injections.cpp (inject:; declared in scenario.cpp: its types
// are inject's, which no header of this folder includes); scenario.cpp parses the scenario's text (the top level,
// tolerance:, expect:, the cross-field rules) with them. A Fields object wraps one mapping, hands out typed values by
// key, remembers which keys were read, and at the end rejects the rest by name, with the closest known key as a hint.
#pragma once

#include "engine/run_config.h"
#include "scenario/scenario.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

namespace ampcheck::scenario::parsing {

inline std::string where(const std::string& file, const YAML::Node& n) {
  if (!n.IsDefined()) return file;  // a missing key has no position
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return file;
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

class Fields {
 public:
  Fields(const YAML::Node& node, std::string file, std::string path)
      : node_(node), file_(std::move(file)), path_(std::move(path)) {
    if (!node_.IsMap()) fail(node_, "expected a mapping");
  }

  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const {
    throw ScenarioError(where(file_, n) + ": " + (path_.empty() ? "(top level)" : path_) + ": " + what);
  }
  [[noreturn]] void fail_key(const std::string& key, const std::string& what) const {
    const YAML::Node n = has(key) ? at(key) : node_;  // a missing key is reported at its mapping
    fail_at(n, key, what);
  }
  // An error at node n (a list element) for the field `field` of this mapping ("steps[1]", "betas[0]").
  [[noreturn]] void fail_at(const YAML::Node& n, const std::string& field, const std::string& what) const {
    throw ScenarioError(where(file_, n) + ": " + sub(field) + ": " + what);
  }
  YAML::Node at(const std::string& key) const { return static_cast<const YAML::Node&>(node_)[key]; }
  std::string sub(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const {
    const YAML::Node n = at(key);
    return n.IsDefined() && !n.IsNull();
  }
  const std::string& file() const { return file_; }

  template <typename T>
  T get(const std::string& key, T fallback, const char* type_name) {
    seen_.insert(key);
    if (!has(key)) return fallback;
    const YAML::Node n = at(key);
    if (!n.IsScalar())
      fail_key(key, std::string("expected ") + type_name + ", got a " + (n.IsMap() ? "mapping" : "list"));
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      fail_key(key, std::string("expected ") + type_name + ", got '" + n.Scalar() + "'");
    }
  }
  // A finite number: YAML's .inf / .nan are refused wherever a number is an amount (lr, scales, factors, floors).
  double num(const std::string& key, double d) {
    const double v = get<double>(key, d, "a number");
    if (!std::isfinite(v)) fail_key(key, "expected a finite number, got '" + at(key).Scalar() + "'");
    return v;
  }
  // The same for a list element n of field `field` (betas[0]); integer() likewise (steps[2]).
  double num_at(const YAML::Node& n, const std::string& field) const {
    double v = 0;
    if (!n.IsScalar() || !YAML::convert<double>::decode(n, v))
      fail_at(n, field, "expected a number, got " + describe(n));
    if (!std::isfinite(v)) fail_at(n, field, "expected a finite number, got '" + n.Scalar() + "'");
    return v;
  }
  int64_t integer_at(const YAML::Node& n, const std::string& field) const {
    int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v))
      fail_at(n, field, "expected an integer, got " + describe(n));
    return v;
  }
  static std::string describe(const YAML::Node& n) {
    return n.IsScalar() ? "'" + n.Scalar() + "'" : n.IsMap() ? "a mapping" : n.IsSequence() ? "a list" : "nothing";
  }
  int64_t integer(const std::string& key, int64_t d) { return get<int64_t>(key, d, "an integer"); }
  bool boolean(const std::string& key, bool d) { return get<bool>(key, d, "true or false"); }
  // Text as reports and the terminal show it: a control character a YAML escape spelled ("\e", "\x9b") becomes \xNN
  // (io::printable_text; the file itself is UTF-8, checked before parsing).
  std::string str(const std::string& key, const std::string& d);  // fields.cpp
  std::string choice(const std::string& key, const std::string& d, const std::vector<std::string>& allowed) {
    std::string v = str(key, d);
    for (const auto& a : allowed)
      if (a == v) return v;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    fail_key(key, "'" + v + "' is not one of: " + list);
  }
  int64_t positive(const std::string& key, int64_t d) {
    int64_t v = integer(key, d);
    if (v <= 0) fail_key(key, "must be > 0, got " + std::to_string(v));
    return v;
  }
  // A positive integer with an upper bound: what keeps a scenario's time and memory finite (resource limits on input).
  // A value past int64 is refused naming the range, never wrapped.
  int64_t bounded(const std::string& key, int64_t d, int64_t most, const std::string& why) {
    if (has(key) && !fits_int64(at(key)))
      fail_key(key,
               "expected an integer from 1 to " + std::to_string(most) + " (" + why + "), got " + describe(at(key)));
    const int64_t v = positive(key, d);
    if (v > most) fail_key(key, "must be at most " + std::to_string(most) + " (" + why + "), got " + std::to_string(v));
    return v;
  }
  // An integer from `least` to `most` (`most_text` names it where it is another field's: "the model's block_size
  // (32)"), or 0 where `zero` says what 0 means ("the preset's"). Out of range, or past int64 (refused, never wrapped),
  // the message names the range and why it is there.
  int64_t ranged(const std::string& key, int64_t d, int64_t least, int64_t most, const std::string& why,
                 const std::string& zero = "", const std::string& most_text = "") {
    seen_.insert(key);
    if (!has(key)) return d;
    const YAML::Node n = at(key);
    int64_t v = 0;
    const bool integer = n.IsScalar() && YAML::convert<int64_t>::decode(n, v);
    if (integer && ((v >= least && v <= most) || (!zero.empty() && v == 0))) return v;
    fail_key(key,
             range_text(least, most, why, zero, most_text) + ", got " + (integer ? std::to_string(v) : describe(n)));
  }
  static std::string range_text(int64_t least, int64_t most, const std::string& why, const std::string& zero = "",
                                const std::string& most_text = "") {
    return "expected " + (zero.empty() ? std::string() : "0 (" + zero + ") or ") + "an integer from " +
           std::to_string(least) + " to " + (most_text.empty() ? std::to_string(most) : most_text) +
           (why.empty() ? std::string() : " (" + why + ")");
  }
  static bool fits_int64(const YAML::Node& n) {
    int64_t v = 0;
    return n.IsScalar() && YAML::convert<int64_t>::decode(n, v);
  }
  // A finite number in (0, most]: seconds, MiB (what a run later multiplies and casts to an integer)
  double positive_amount(const std::string& key, double d, double most, const std::string& unit) {
    const double v = num(key, d);
    if (!(v > 0 && v <= most)) {
      char got[64];
      std::snprintf(got, sizeof got, "%g", v);
      fail_key(key, "must be in (0, " + std::to_string(static_cast<int64_t>(most)) + "] " + unit + ", got " + got);
    }
    return v;
  }
  // An error at this mapping itself ("model: 824,693,522,432 parameters ...")
  [[noreturn]] void fail_here(const std::string& what) const { fail(node_, what); }
  Fields map(const std::string& key) {
    seen_.insert(key);
    return Fields(at(key), file_, sub(key));
  }
  YAML::Node raw(const std::string& key) {
    seen_.insert(key);
    return at(key);
  }
  void done() const {
    for (const auto& kv : node_) {
      const std::string k = kv.first.as<std::string>();
      if (seen_.count(k)) continue;
      std::string known;
      for (const auto& s : seen_) known += (known.empty() ? "" : ", ") + s;
      throw ScenarioError(where(file_, kv.first) + ": " + sub(k) + ": unknown key (known here: " + known + ")");
    }
  }

 private:
  YAML::Node node_;
  std::string file_, path_;
  std::set<std::string> seen_;
};

// parse_model.cpp
void parse_model(Fields f, models::ModelConfig& m);
void parse_data(Fields f, data::DataConfig& d, const models::ModelConfig& model);
// "gpt nano has 40 modules: wte, wpe, h.0, h.0.ln_1, ...": where the names come from, and a HINT
std::string some_modules(const models::ModelConfig& m, const std::vector<models::ModuleInfo>& tree);

// parse_training.cpp
void parse_optimizer(Fields f, engine::OptimizerConfig& o);
void parse_schedule(Fields f, engine::ScheduleConfig& s);
void parse_loop(Fields f, engine::LoopConfig& l);
void parse_distributed(Fields f, engine::RunConfig& run);

// parse_strategy.cpp
void parse_strategy(Fields& top, engine::Strategy& s);

}  // namespace ampcheck::scenario::parsing
