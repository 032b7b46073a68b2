// The sweep page's lead (html.h sweep_lead): the recommendation, the per-strategy table, the localization with its
// probes and the fix, ahead of the generic report.
#include "report/format.h"
#include "report/html.h"
#include "report/svg.h"

#include "verdict/kind.h"

#include <cmath>
#include <sstream>

namespace ampcheck::report {

using svg::escape;

namespace {

std::string ms_list(const std::vector<double>& v) {
  std::string t;
  for (double x : v) t += (t.empty() ? "" : " / ") + format_number(x, 4);
  return t;
}

std::string speed_badge(const std::string& speed) {
  if (speed == "faster") return "<span class=\"pass\">faster</span>";
  if (speed == "slower") return "<span class=\"fail\">slower</span>";
  if (speed == "not decisive") return "<span class=\"warn\">not decisive</span>";
  return escape(speed.empty() ? "-" : speed);
}

// The paste-able fix for modules found: each kept in FP32 under autocast (a wrapper of its forward: autocast off,
// floating inputs cast to fp32), the same lines in a plain loop, before Trainer(...) or in a LightningModule.
std::string keep_fp32_snippet(const std::vector<std::string>& modules) {
  std::string names;
  for (const auto& m : modules) names += (names.empty() ? "\"" : ", \"") + m + "\"";
  return "import torch\n"
         "def keep_fp32(model, names):  # autocast off inside each module, its floating inputs cast to fp32\n"
         "    for name in names:\n"
         "        m = model.get_submodule(name)\n"
         "        def forward(*a, _f=m.forward, _dev=next(m.parameters()).device.type, **k):\n"
         "            up = lambda x: x.float() if torch.is_tensor(x) and x.is_floating_point() else x\n"
         "            with torch.autocast(_dev, enabled=False):\n"
         "                return _f(*map(up, a), **{n: up(v) for n, v in k.items()})\n"
         "        m.forward = forward\n"
         "# plain loop: after building the model; HF Trainer: before Trainer(model=...); Lightning: in setup() of the "
         "LightningModule\n"
         "keep_fp32(model, [" +
         names + "])\n";
}

}  // namespace

std::string sweep_lead(const SweepPage& p) {
  std::ostringstream o;
  o << "<h2>Recommendation</h2>\n<p class=\"rec\">" << escape(p.recommendation) << "</p>\n";
  if (!p.timing.empty()) o << "<p class=\"msg\">" << escape(p.timing) << "</p>\n";
  o << "<h2>Strategies</h2>\n<table class=\"summary\"><tr><th>strategy</th><th>outcome</th><th>verdict</th>"
       "<th>signal</th><th>max dev / allowed</th><th>skipped</th><th>ms/step (median after warm-up)</th>"
       "<th>spread [p10, p90]</th><th>timing runs (ms/step)</th><th>vs FP32</th><th>speed</th><th>tokens/s</th>"
       "<th>peak memory</th><th>result</th></tr>\n";
  for (const auto& r : p.rows) {
    std::string runs = ms_list(r.runs_ms);
    if (!r.retimed_ms.empty())
      runs = "re-runs: " + ms_list(r.retimed_ms) + " (FP32 interleaved: " + ms_list(r.retimed_fp32_ms) + ")";
    o << "<tr><td>" << escape(r.strategy) << "</td><td>" << escape(r.outcome) << "</td><td>" << escape(r.verdict)
      << "</td><td>" << escape(r.signal) << "</td><td class=\"n\">" << format_number(r.margin, 3)
      << "</td><td class=\"n\">" << r.skipped_steps << "</td><td class=\"n\">" << format_number(r.ms, 4)
      << "</td><td class=\"n\">[" << format_number(r.p10_ms, 4) << ", " << format_number(r.p90_ms, 4)
      << "]</td><td class=\"n\">" << escape(runs.empty() ? "-" : runs) << "</td><td class=\"n\">"
      << (std::isfinite(r.speedup) ? format_number(r.speedup, 3) + "x" : "-")
      << (std::isfinite(r.noise) ? " (noise x" + format_number(r.noise, 3) + ")" : "") << "</td><td>"
      << speed_badge(r.speed) << "</td><td class=\"n\">" << format_si(r.tokens_per_s, "") << "</td><td class=\"n\">"
      << format_bytes(r.peak_memory_bytes) << "</td><td>"
      << (r.speed == "reference" ? std::string("reference")
                                 : std::string("<span class=\"") + (r.pass ? "pass\">PASS" : "fail\">FAIL") + "</span>")
      << "</td></tr>\n";
  }
  o << "</table>\n";
  for (const auto& r : p.rows)
    if (!r.message.empty() && r.speed != "reference")
      o << "<p class=\"msg\"><b>" << escape(r.strategy) << "</b>: " << escape(r.message) << "</p>\n";
  for (const auto& l : p.localizations) {
    o << "<h2>Localization: " << escape(l.strategy) << "</h2>\n<p class=\"rec\">" << escape(l.message) << "</p>\n";
    if (l.found) o << "<p class=\"msg\">modules kept in FP32: <code>";
    for (size_t i = 0; l.found && i < l.modules.size(); ++i) o << (i ? ", " : "") << escape(l.modules[i]);
    if (l.found) o << "</code> (parent <code>" << escape(l.parent.empty() ? "(root)" : l.parent) << "</code>)</p>\n";
    o << "<table class=\"summary\"><tr><th>probe</th><th>modules kept in FP32</th><th>verdict</th><th>ms/step</th>"
         "<th>peak memory</th><th>message</th></tr>\n";
    for (size_t i = 0; i < l.probes.size(); ++i) {
      const auto& pr = l.probes[i];
      std::string keep;
      for (const auto& m : pr.keep_fp32) keep += (keep.empty() ? "" : ", ") + (m.empty() ? "(the whole model)" : m);
      if (pr.keep_fp32.size() > 8)
        keep = std::to_string(pr.keep_fp32.size()) + " modules: " + pr.keep_fp32.front() + " … " + pr.keep_fp32.back();
      o << "<tr><td class=\"n\">" << i + 1 << "</td><td>" << escape(keep.empty() ? "(none)" : keep) << "</td><td>"
        << "<span class=\"" << (verdict::is(pr.verdict, verdict::Kind::Tracks) ? "pass" : "fail") << "\">"
        << escape(pr.verdict) << "</span></td><td class=\"n\">" << format_number(pr.ms, 4) << "</td><td class=\"n\">"
        << format_bytes(pr.peak_memory_bytes) << "</td><td>" << escape(pr.message) << "</td></tr>\n";
    }
    o << "</table>\n<h3>Fix</h3>\n";
    if (!l.fix.empty()) o << "<p class=\"msg\">" << escape(l.fix) << "</p>\n";
    if (l.found) o << "<pre class=\"fix\">" << escape(keep_fp32_snippet(l.modules)) << "</pre>\n";
    if (l.fix.empty() && !l.found)
      o << "<p class=\"msg\">no set of modules could be named (above): train this strategy's failing part in FP32, "
           "or use a strategy that tracks</p>\n";
  }
  o << "<p class=\"meta\">sweep " << escape(p.key)
    << (p.command.empty() ? "" : " · command: <code>" + escape(p.command) + "</code>")
    << " · sweep.json holds the same answer</p>\n";
  return o.str();
}

}  // namespace ampcheck::report
