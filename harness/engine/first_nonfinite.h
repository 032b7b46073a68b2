// Which module went non-finite first (the "first non-finite: module M (pass) at step S" of check's and judge's
// message, and localize's starting point). The model's watch of each step (module_tree.h: per module, the sum of its
// output / input gradient, on the device, no sync) waits here until that step's row reaches the host at the flush;
// for the first row that is non-finite — loss or parameters, or a GradScaler skip — its watch is read: a SYNC POINT,
// once per run. Rows that are finite cost nothing but the kept device tensors.
#pragma once

#include "models/module_tree.h"
#include "trajectory/trajectory.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::engine {

class FirstNonfinite {
 public:
  // a trained step's watch, in step order (one per pending row)
  void add(models::NonfiniteWatch watch) { pending_.push_back(std::move(watch)); }
  // the pending row `pending` (its host values `row`, the trajectory's step `step`) reached the host; skip_counts: a
  // skipped step counts as non-finite (a GradScaler steps, and the step is past the loop's delay)
  void note(int64_t step, const std::array<double, trajectory::kNumColumns>& row, size_t pending, bool skip_counts,
            const std::vector<models::ModuleInfo>& tree);
  // the pending watches dropped (after a flush, or an error that drops the pending rows)
  void clear_pending() { pending_.clear(); }

  int64_t step = -1;   // the first non-finite step, or -1
  std::string module;  // its first non-finite module ("" when none held one, or its watch was not kept)
  std::string pass;    // "forward" | "backward"

 private:
  std::vector<models::NonfiniteWatch> pending_;
};

}  // namespace ampcheck::engine
