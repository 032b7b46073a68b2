// The subcommands: each calls its use case, prints what it returns, and returns the exit code (commands.h).
#include "cli/commands.h"

#include "io/text.h"
#include "report/format.h"

#include <unistd.h>

#include <cerrno>
#include <iomanip>
#include <iostream>
#include <stdexcept>

namespace ampcheck::cli {

namespace {

// check, validate and judge: SKIPPED, or the table, the command's notes, where the reports are, the counts.
int print_suite(const usecases::SuiteResult& r) {
  if (!r.skipped.empty()) {
    std::cout << "SKIPPED: " << r.skipped << "\n";
    return r.exit_code();
  }
  if (!r.written) return r.exit_code();
  print_result_table(r.summary);
  for (const auto& note : r.notes) std::cout << io::printable_text(note) << "\n";
  std::cout << "reports: " << r.reports_dir << "/{summary.json,junit.xml,summary.md,report.html}\n"
            << r.summary.passed() << " passed, " << r.summary.failed() << " failed\n";
  return r.exit_code();
}

}  // namespace

int cmd_list(const std::string& suite) {
  const auto l = usecases::list(suite);
  for (const auto& [name, why] : l.scenarios) std::cout << std::left << std::setw(32) << name << " " << why << "\n";
  if (!suite.empty()) return 0;
  std::cout << "strategies:\n";
  for (const auto& [name, what] : l.strategies) std::cout << "  " << std::left << std::setw(18) << name << what << "\n";
  std::cout << "suites: ";
  for (const auto& s : l.suites) std::cout << s << " ";
  std::cout << "\n";
  return 0;
}

int cmd_run(const RunOptions& opts) {
  const auto r = usecases::run_command(opts, std::cout);
  if (!r.skipped.empty()) {
    std::cout << "SKIPPED: " << r.skipped << "\n";
    return 77;  // CTest's skip code for the gpu label
  }
  if (!r.written) return 0;
  std::cout << "\n"
            << std::left << std::setw(30) << "scenario" << std::setw(11) << "device" << std::setw(11) << "status"
            << std::setw(8) << "steps" << std::setw(10) << "loss0" << std::setw(10) << "loss_end" << std::setw(9)
            << "skipped" << std::setw(10) << "ms/step"
            << "result\n";
  for (const auto& row : r.results) {
    const run::ScenarioResult& s = row.result;
    std::cout << std::left << std::setw(30) << s.name << std::setw(11) << s.device_class << std::setw(11)
              << engine::status_name(s.outcome.status) << std::setw(8) << s.trajectory.size() << std::setw(10)
              << report::format_number(s.first_loss) << std::setw(10) << report::format_number(s.final_loss)
              << std::setw(9) << s.trajectory.skipped_steps() << std::setw(10)
              << report::format_number(s.timing.median_ms, 3) << (row.expectation_met ? "PASS" : "FAIL") << "  "
              << row.expectation_note << "\n";
  }
  std::cout << (r.results.size() - r.failures()) << " passed, " << r.failures() << " failed\n";
  return r.failures() == 0 ? 0 : 1;
}

int cmd_record(const RunOptions& opts) {
  const auto r = usecases::record_references(opts, std::cout);
  std::cout << r.recorded << " recorded, " << r.kept << " kept\n";
  return 0;
}

int cmd_check(const RunOptions& opts) { return print_suite(usecases::check(opts, std::cout)); }

int cmd_default(const RunOptions& opts) { return print_suite(usecases::check_default(opts, std::cout)); }

int cmd_validate(const RunOptions& opts, const ValidateOptions& v) {
  if (!v.seal.empty()) {
    usecases::seal_goldens(v.seal, std::cout);
    return 0;
  }
  if (v.fleet) {
    const auto r = usecases::validate_fleet(opts, v, std::cout);
    if (r.written) {  // rank 0 speaks for the job; every rank returns the same code
      // in one write(2): the ranks of a torchrun job share its stdout, and a report flushed in buffer-sized pieces
      // could have another rank's output land inside one of its lines
      std::string text;
      for (const auto& line : r.lines) text += line + "\n";
      text += "reports: " + r.reports_dir + "/summary.md\n";
      std::cout << std::flush;
      for (size_t done = 0; done < text.size();) {
        const ssize_t n = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // (stdout closed: nothing more to say)
        done += static_cast<size_t>(n);
      }
    }
    return r.exit_code();
  }
  if (!v.plant_ranks.empty() || v.repeat > 0 || v.duration_s > 0)
    throw std::invalid_argument("--plant-rank, --repeat and --duration belong to --fleet");
  return print_suite(usecases::validate_stack(opts, v, std::cout));
}

int cmd_judge(const JudgeInputs& in, const RunOptions& opts) {
  return print_suite(usecases::judge_runs(in, opts, std::cout));
}

int cmd_reference(const ReferenceInputs& in) {
  const auto r = usecases::make_reference(in);
  std::string labels;
  for (const auto& l : r.noise_labels) labels += (labels.empty() ? "" : ",") + l;
  std::cout << r.path << ": reference from " << in.fp32_run << " (" << r.steps << " steps) and "
            << r.noise_labels.size() << " noise run(s): " << labels << "\n";
  return 0;
}

int cmd_compare(const std::string& run_a, const std::string& run_b, const report::CompareThresholds& t) {
  const auto c = usecases::compare(run_a, run_b, t);
  std::cout << c.text;
  return c.regressed ? 1 : 0;
}

int cmd_report(const std::string& run_dir, bool force) {
  for (const auto& path : usecases::rewrite_reports(run_dir, force)) std::cout << path << "\n";
  return 0;
}

int cmd_doctor(const std::string& device, bool json, const DoctorOptions& options) {
  const auto d = usecases::doctor(device, options);
  std::cout << (json ? d.json : d.text);
  return d.ok ? 0 : 1;
}

int cmd_sweep(const usecases::SweepOptions& o) {
  const auto r = usecases::sweep(o, std::cout);
  print_sweep_table(r);
  std::cout << "sweep " << r.key << ": " << r.trainings << " trainings, " << r.reused << " reused, "
            << static_cast<int64_t>(r.seconds + 0.5) << " s; reports: " << r.dir
            << "/{summary.json,summary.md,report.html,sweep.json}\n";
  // exit 1 when a row FAILs (a strategy that does not track, an error, a run that does not follow its plan; a warning
  // under --strict), as check and judge: a CI step fails on it; the recommendation is still written
  for (const auto& row : r.rows)
    if (!row.judged.pass) return 1;
  return 0;
}

int cmd_localize(const usecases::LocalizeOptions& o) {
  const auto r = usecases::localize_scenarios(o, std::cout);
  if (!r.skipped.empty()) {
    std::cout << "SKIPPED: " << r.skipped << "\n";
    return r.exit_code();
  }
  print_localize_table(r);
  std::cout << "reports: " << r.reports_dir << "/{summary.json,junit.xml,summary.md,report.html,localize.json}\n"
            << r.summary.passed() << " passed, " << r.summary.failed() << " failed\n";
  return r.exit_code();
}

}  // namespace ampcheck::cli
