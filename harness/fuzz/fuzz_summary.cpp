// Fuzz target: summary.json (report::read_summary_json) and what `compare` and `report` do with one read: the
// comparison, its text and the HTML report.
#include "fuzz_support.h"
#include "report/compare.h"
#include "report/html.h"
#include "report/summary.h"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ampcheck::report;
  const ampcheck::fuzz::InputFile input(data, size, ".json");
  const std::string& path = input.path();
  RunSummary s;
  try {
    s = read_summary_json(path);
  } catch (const std::exception& e) {
    ampcheck::fuzz::check_names_file(e.what(), path);
    return 0;
  }
  const Comparison c = compare_runs(s, s, CompareThresholds{});
  const std::string text = format_comparison(s, s, c);
  const std::string html = render_html(s, std::vector<ScenarioSeries>(s.scenarios.size()));
  FUZZ_CHECK(!html.empty(), "the report renders");
  return 0;
}
