// summary.json's record described once (report/summary.h visit_fields, io/record_json.h): every field listed is
// written and read back, every field is documented in docs/SUMMARY_SCHEMA.md, and a bad value is an error naming the
// file, the scenario, the field's path and the kind expected.
#include "report/summary.h"

#include "io/record_json.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace ampcheck::report;

namespace {

std::string temp_dir() {
  const std::string d = ::testing::TempDir() + "/ampcheck_record_" + std::to_string(getpid());
  ::mkdir(d.c_str(), 0755);
  return d;
}

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Sets every field a record lists to a value of its own, none the default: a reader that skips a field, or a writer
// that drops one, leaves the default and the round trip differs. Lists get one filled entry (a list of numbers also
// a NaN, written as null).
struct FillDistinct {
  int64_t counter = 1;
  template <class F>
  void operator()(const char* name, F& f) {
    ++counter;
    if constexpr (std::is_same_v<F, std::string>) f = std::string(name) + "-" + std::to_string(counter);
    else if constexpr (std::is_same_v<F, bool>)
      f = !f;
    else if constexpr (std::is_same_v<F, int64_t>)
      f = counter;
    else if constexpr (std::is_same_v<F, double>)
      f = counter + 0.25;
    else if constexpr (std::is_same_v<F, std::vector<double>>)
      f = {counter + 0.5, NAN};
    else if constexpr (ampcheck::io::record_detail::IsVector<F>::value) {
      f.resize(1);
      visit_fields(f[0], *this);
    } else
      visit_fields(f, *this);
  }
  template <class F>
  void required(const char* name, F& f) {
    (*this)(name, f);
  }
  template <class F>
  void optional(const char* name, F& f, bool) {
    (*this)(name, f);
  }
};

// The JSON names a record lists, nested records' names too.
struct CollectNames {
  std::set<std::string> names;
  template <class F>
  void operator()(const char* name, F& f) {
    names.insert(name);
    if constexpr (ampcheck::io::record_detail::IsVector<F>::value) {
      if constexpr (!ampcheck::io::record_detail::kScalar<typename F::value_type>) {
        typename F::value_type e{};
        visit_fields(e, *this);
      }
    } else if constexpr (!ampcheck::io::record_detail::kScalar<F>) {
      visit_fields(f, *this);
    }
  }
  template <class F>
  void required(const char* name, F& f) {
    (*this)(name, f);
  }
  template <class F>
  void optional(const char* name, F& f, bool) {
    (*this)(name, f);
  }
};

RunSummary filled_run() {
  RunSummary s;
  FillDistinct fill;
  visit_fields(s, fill);
  s.scenarios.resize(2);
  for (auto& c : s.scenarios) visit_fields(c, fill);
  return s;
}

// The message read_summary_json throws for a file holding this text.
std::string error_for(const std::string& text, const std::string& path) {
  std::ofstream(path) << text;
  try {
    read_summary_json(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::string kHeader = R"({"schema": "ampcheck-summary", "version": 6, )";

}  // namespace

TEST(ReportRecord, EveryListedFieldIsWrittenAndReadBack) {
  const std::string path = temp_dir() + "/summary.json";
  const RunSummary s = filled_run();
  write_summary_json(path, s);
  const RunSummary back = read_summary_json(path);
  ASSERT_EQ(back.scenarios.size(), 2u);
  EXPECT_EQ(ampcheck::io::record_to_json(back), ampcheck::io::record_to_json(s)) << "the run's header";
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(ampcheck::io::record_to_json(back.scenarios[i]), ampcheck::io::record_to_json(s.scenarios[i]))
        << "scenario " << i << ": a field the writer dropped or the reader skipped";
  // and the file holds every name the record lists (the nested objects included: their flags were set by the fill)
  CollectNames listed;
  ScenarioSummary probe;
  visit_fields(probe, listed);
  const std::string text = slurp(path);
  for (const auto& name : listed.names)
    EXPECT_NE(text.find("\"" + name + "\":"), std::string::npos) << name << " is not in summary.json";
  for (const char* nested : {"reference_value", "applied", "statistical_verdict", "rank_collective_share"})
    EXPECT_EQ(listed.names.count(nested), 1u) << nested << ": the nested records are listed too";
}

// docs/SUMMARY_SCHEMA.md is the schema's reference: every field the record lists is named there, in code spans.
TEST(ReportRecord, TheSchemaDocumentNamesEveryField) {
  const std::string doc = slurp(std::string(AMPCHECK_TESTS_DIR) + "/../../docs/SUMMARY_SCHEMA.md");
  ASSERT_FALSE(doc.empty());
  std::string spans;  // the text of every `code span`
  const std::regex span("`([^`]*)`");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), span); it != std::sregex_iterator(); ++it)
    spans += " " + (*it)[1].str() + " ";
  CollectNames listed;
  RunSummary run;
  visit_fields(run, listed);
  ScenarioSummary scenario;
  visit_fields(scenario, listed);
  for (const auto& name : listed.names)
    EXPECT_TRUE(std::regex_search(spans, std::regex("[^A-Za-z0-9_]" + name + "[^A-Za-z0-9_]")))
        << "`" << name << "` is not documented in docs/SUMMARY_SCHEMA.md";
}

TEST(ReportRecord, ABadValueNamesTheFileScenarioFieldAndKind) {
  const std::string d = temp_dir();
  const std::string a = R"("name": "a", "expect": "tracks", "verdict": "tracks", "pass": true)";
  struct Case {
    std::string body, want;
  };
  const std::vector<Case> cases = {
      {R"("scenarios": [{)" + a + R"(, "signals": [{"name": "loss"}, {"name": "grad_norm", "max_margin": "x"}]}]})",
       "field 'signals[1].max_margin' of scenario a: expected a number or null, got \"x\""},
      {R"("scenarios": [{"name": "a", "verdict": "tracks", "pass": true}]})",
       "field 'expect' of scenario a: expected a string, got nothing (the field is missing)"},
      {R"("scenarios": [{)" + a + R"(, "steps": 2.5}]})", "field 'steps' of scenario a: expected an integer, got 2.5"},
      {R"("scenarios": [{)" + a + R"(, "distributed": [1]}]})",
       "field 'distributed' of scenario a: expected an object {world_size, backend,"},
      {R"("scenarios": [{)" + a + R"(, "distributed": {"rank_collective_share": [0.5, "half"]}}]})",
       "field 'distributed.rank_collective_share[1]' of scenario a: expected a number or null, got \"half\""},
      {R"("scenarios": [{)" + a + R"(, "warnings": [{"message": "m"}]}]})",
       "field 'warnings[0].signal' of scenario a: expected a string, got nothing"},
      {R"("scenarios": [{"name": 7}]})", "field 'name' of scenario 1: expected a string, got 7"},
      {R"("scenarios": [3]})", "field 'scenarios': expected scenario objects, got 3 (entry 0)"},
      {R"("suite": ["ci"], "scenarios": []})", "field 'suite': expected a string, got [\"ci\"]"},
      {R"("strict": 1, "scenarios": []})", "field 'strict': expected true or false, got 1"},
      {R"("scenarios": {}})", "field 'scenarios': expected a list of scenario objects, got {}"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = d + "/bad" + std::to_string(i) + ".json";
    const std::string message = error_for(kHeader + cases[i].body, path);
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
    EXPECT_NE(message.find(cases[i].want), std::string::npos) << "case " << i << ": " << message;
    EXPECT_NE(message.find("HINT: "), std::string::npos) << message;
  }
}
