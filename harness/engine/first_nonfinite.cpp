// The first non-finite module of a run (first_nonfinite.h).
#include "engine/first_nonfinite.h"

#include <cmath>

namespace ampcheck::engine {

void FirstNonfinite::note(int64_t row_step, const std::array<double, trajectory::kNumColumns>& row, size_t pending,
                          bool skip_counts, const std::vector<models::ModuleInfo>& tree) {
  if (step >= 0) return;
  const bool skipped = skip_counts && row[trajectory::kSkipped] > 0;
  if (std::isfinite(row[trajectory::kLoss]) && std::isfinite(row[trajectory::kParamNorm]) && !skipped) return;
  step = row_step;
  if (pending >= pending_.size()) return;
  const models::FirstNonfinite f = models::first_nonfinite(pending_[pending], tree);  // SYNC POINT, once
  module = f.module;
  pass = f.pass;
}

}  // namespace ampcheck::engine
