// The fleet report's four files, derived from FleetSummary (fleet_report.h).
#include "usecases/fleet_report.h"

#include "io/record_json.h"
#include "io/text.h"
#include "report/format.h"

#include <sstream>

namespace ampcheck::usecases {

namespace {

using report::escape_markup;
using report::markdown_text;

// where a rank runs, in one cell: host, device, and the GPU's UUID / PCI bus where known, else the CPU model
std::string where(const FleetRankRow& r) {
  std::string s = r.host + " " + r.device;
  if (!r.gpu_uuid.empty()) s += " " + r.gpu_uuid;
  if (!r.pci_bus.empty()) s += " (PCI " + r.pci_bus + ")";
  if (r.gpu_uuid.empty() && r.pci_bus.empty()) s += " (" + r.cpu_model + ")";
  return s;
}
std::string against(const validate::FleetFinding& f) {
  return f.against.empty() ? "the majority (rank " + std::to_string(f.majority_rank) + ")" : f.against;
}
// every finding of a rank, in one cell, one after another
std::string all_findings(const FleetRankRow& r, const std::string& separator) {
  std::string s;
  for (const auto& f : r.findings)
    s += (s.empty() ? "" : separator) + "repetition " + std::to_string(f.repetition) + ", " + f.scenario +
         " (against " + against(f) + "): " + f.difference +
         (f.replay == validate::ReplayKind::NotReplayed ? "" : "; replay: " + validate::to_string(f.replay));
  return s;
}
// a rank's row's last cell: every finding, or what else decided its status
std::string rank_cell(const FleetRankRow& r, const std::string& separator) {
  std::string s = all_findings(r, separator);
  if (s.empty() && r.status != validate::FleetRankStatus::Agrees) s = r.message;
  if (r.message.find("no measurable effect") != std::string::npos)
    s += (s.empty() ? "" : separator) + "its plant (" + r.plants + ") had no measurable effect";
  return s;
}

}  // namespace

std::string fleet_summary_json(const FleetSummary& s) {
  nlohmann::json j = io::record_to_json(s);
  io::make_json_strings_printable(j);  // a host name or an error text may hold bytes that are not UTF-8
  return j.dump(2) + "\n";
}

std::string fleet_summary_md(const FleetSummary& s) {
  std::ostringstream m;
  m << "# ampcheck validate --fleet: " << (s.pass ? "PASS" : "FAIL") << "\n\n"
    << markdown_text(s.verdict) << "\n\n"
    << s.world_size << " ranks, " << s.repetitions << " repetition(s) of " << markdown_text(io::joined(s.scenarios))
    << "; " << s.groups.size() << " stack group(s).\n\n## Groups\n\n"
    << "| group | ranks | hosts | golden class | drift from the main group | goldens | no majority | result |\n"
    << "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& g : s.groups)
    m << "| " << g.id << (g.main ? " (main)" : "") << " | " << validate::rank_list(g.ranks) << " | "
      << markdown_text(io::joined(g.hosts)) << " | " << markdown_text(g.golden_class) << " | "
      << markdown_text(g.drift.empty() ? "-" : g.drift) << " | " << markdown_text(g.goldens) << " | " << g.no_majority
      << " | " << (g.pass ? "PASS" : "FAIL") << " |\n";
  m << "\n## Ranks\n\n| rank | where | group | status | disagreed | findings (every one) |\n"
    << "| --- | --- | --- | --- | --- | --- |\n";
  for (const auto& r : s.ranks)
    m << "| " << r.rank << " | " << markdown_text(where(r)) << " | " << r.group << " | "
      << markdown_text(validate::to_string(r.status)) << " | " << r.rate << " | " << markdown_text(rank_cell(r, " / "))
      << " |\n";
  if (!s.plants_without_effect.empty()) {
    m << "\n## Plants with no measurable effect\n\n";
    for (const auto& p : s.plants_without_effect) m << "- " << markdown_text(p) << "\n";
  }
  m << "\n## Exchange\n\n"
    << s.exchange.backend << ": " << s.exchange.exchanges << " exchanges, rank 0 sent " << s.exchange.bytes_sent
    << " bytes and received " << s.exchange.bytes_received << " bytes in "
    << report::format_number(s.exchange.seconds, 3) << " s; identity message " << s.exchange.identity_bytes
    << " bytes, runs message " << s.exchange.runs_bytes << " bytes per repetition.\n";
  return m.str();
}

std::string fleet_junit_xml(const FleetSummary& s) {
  int64_t failures = 0;
  for (const auto& r : s.ranks) failures += r.pass ? 0 : 1;
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<testsuites name=\"ampcheck\" tests=\"" << s.ranks.size() << "\" failures=\"" << failures << "\">\n"
    << "  <testsuite name=\"ampcheck.fleet\" tests=\"" << s.ranks.size() << "\" failures=\"" << failures << "\">\n";
  for (const auto& r : s.ranks) {
    // one case per rank, named by where it runs: a scheduler drains the node of a failing case
    x << "    <testcase classname=\"fleet." << escape_markup(r.host) << "\" name=\"rank " << r.rank << " "
      << escape_markup(r.device) << "\">\n";
    if (!r.pass)
      x << "      <failure message=\"" << escape_markup(validate::to_string(r.status)) << "\">"
        << escape_markup(r.message) << "</failure>\n";
    else
      x << "      <system-out>" << escape_markup(r.message) << "</system-out>\n";
    x << "    </testcase>\n";
  }
  x << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

std::string fleet_report_html(const FleetSummary& s) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>ampcheck fleet: "
    << (s.pass ? "PASS" : "FAIL") << "</title>\n<style>\n"
    << "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin:.5em 0 1.5em}"
    << "td,th{border:1px solid #bbb;padding:.25em .5em;vertical-align:top;text-align:left}"
    << ".pass{color:#060}.fail{color:#b00;font-weight:bold}.drift{background:#fff6d8}\n"
    << "</style>\n</head>\n<body>\n<h1>ampcheck validate --fleet: <span class=\"" << (s.pass ? "pass" : "fail") << "\">"
    << (s.pass ? "PASS" : "FAIL") << "</span></h1>\n<p>" << escape_markup(s.verdict) << "</p>\n<p>" << s.world_size
    << " ranks, " << s.repetitions << " repetition(s) of " << escape_markup(io::joined(s.scenarios))
    << "</p>\n<h2>Groups (one stack fingerprint each)</h2>\n<table>\n<tr><th>group</th><th>ranks</th><th>hosts</th>"
    << "<th>golden class</th><th>drift from the main group</th><th>goldens</th><th>result</th></tr>\n";
  for (const auto& g : s.groups)
    h << "<tr" << (g.drift.empty() ? "" : " class=\"drift\"") << "><td>" << g.id << (g.main ? " (main)" : "")
      << "</td><td>" << validate::rank_list(g.ranks) << "</td><td>" << escape_markup(io::joined(g.hosts)) << "</td><td>"
      << escape_markup(g.golden_class) << "</td><td>" << escape_markup(g.drift.empty() ? "-" : g.drift) << "</td><td>"
      << escape_markup(g.goldens) << "</td><td class=\"" << (g.pass ? "pass" : "fail") << "\">"
      << escape_markup(g.message) << "</td></tr>\n";
  h << "</table>\n<h2>Ranks</h2>\n<table>\n<tr><th>rank</th><th>where</th><th>group</th><th>status</th>"
    << "<th>disagreed</th><th>findings (every one) and replays</th></tr>\n";
  for (const auto& r : s.ranks)
    h << "<tr><td>" << r.rank << "</td><td>" << escape_markup(where(r)) << "</td><td>" << r.group << "</td><td class=\""
      << (r.pass ? "pass" : "fail") << "\">" << escape_markup(validate::to_string(r.status)) << "</td><td>" << r.rate
      << "</td><td style=\"white-space:pre-line\">" << escape_markup(rank_cell(r, "\n")) << "</td></tr>\n";
  h << "</table>\n<h2>Outliers</h2>\n";
  bool any = false;
  for (const auto& r : s.ranks)
    for (const auto& f : r.findings) {
      if (!any)
        h << "<table>\n<tr><th>rank</th><th>repetition</th><th>scenario</th><th>against</th>"
          << "<th>first difference</th><th>replay</th></tr>\n";
      any = true;
      h << "<tr><td>" << r.rank << "</td><td>" << f.repetition << "</td><td>" << escape_markup(f.scenario)
        << "</td><td>" << escape_markup(against(f)) << "</td><td>" << escape_markup(f.difference) << "</td><td>"
        << escape_markup(validate::to_string(f.replay) + (f.replay_message.empty() ? "" : ": " + f.replay_message))
        << "</td></tr>\n";
    }
  h << (any ? "</table>\n" : "<p>none</p>\n");
  if (!s.plants_without_effect.empty()) {
    h << "<h2>Plants with no measurable effect</h2>\n<ul>\n";
    for (const auto& p : s.plants_without_effect) h << "<li>" << escape_markup(p) << "</li>\n";
    h << "</ul>\n";
  }
  h << "</body>\n</html>\n";
  return h.str();
}

}  // namespace ampcheck::usecases
