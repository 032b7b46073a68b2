// The terminal progress printer.
#include "run/progress.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <unistd.h>

namespace ampcheck::run {

engine::Trainer::ProgressFn terminal_progress(int64_t total_steps) {
  const bool tty = ::isatty(STDOUT_FILENO);
  auto start = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  auto next_plain = std::make_shared<int64_t>(0);
  return [=](int64_t step, const trajectory::Trajectory& t) {
    const int64_t done = step + 1;
    if (!tty && done < *next_plain && done != total_steps) return;
    *next_plain = done + std::max<int64_t>(1, total_steps / 10);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - *start).count();
    const double eta = done > 0 ? elapsed / done * (total_steps - done) : 0;
    const auto& row = t.rows.back();
    char line[160];
    std::snprintf(line, sizeof(line), "  step %lld/%lld  loss %.4f  scale %g  skipped %lld  eta %.0fs",
                  static_cast<long long>(done), static_cast<long long>(total_steps), row[trajectory::kLoss],
                  row[trajectory::kLossScale], static_cast<long long>(t.skipped_steps()), eta);
    if (tty) std::printf("\r%-78s%s", line, done == total_steps ? "\n" : "");
    else
      std::printf("%s\n", line);
    std::fflush(stdout);
  };
}

}  // namespace ampcheck::run
