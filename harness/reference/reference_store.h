// ReferenceStore — FP32 reference trajectories, one HDF5 file per reference key under
// references/<device-class>/<key>.h5.
//
// A scenario's reference is the same model + data + optimizer + schedule + loop + seed trained in strict FP32 (TF32
// off, deterministic), with its injections removed and its training-loop pitfalls corrected (unscale before
// clipping, update() called, no unscale per micro-batch). The key is a stable hash (FNV-1a) of the canonical text
// of exactly those fields, so scenarios that differ only in strategy, injections or pitfalls share one reference.
// Beside the FP32 trajectory the file holds its noise runs (/noise/<label>/): FP32 runs of the same reference config
// that differ only by a perturbation — initial weights moved by +1 / -1 ulp, another init seed, another data order,
// the first optimizer step skipped (what a dynamic GradScaler does when its starting scale overflows: whether this
// workload's training shrugs off a one-step delay or is moved by it, which the verdict's skip alignment assumes).
// The verdict measures every signal's noise on them (verdict/signals.h). series/loss_spread keeps, per step, the
// largest |loss - reference loss| over them (for charts).
#pragma once

#include "engine/run_config.h"
#include "trajectory/trajectory_file.h"

#include <string>
#include <vector>

namespace ampcheck::reference {

struct ReferenceKey {
  std::string key;        // "<model>-<16 hex digits>"
  std::string canonical;  // the text that was hashed (stored in the file; a mismatch means a stale reference)
};

ReferenceKey reference_key(const engine::RunConfig& run);
// The scenario's run turned into its FP32 reference run.
engine::RunConfig reference_run_config(const engine::RunConfig& run);
std::string reference_path(const std::string& root, const std::string& device_class, const std::string& key);

// The perturbations that make the noise runs.
struct NoisePerturbation {
  std::string label;         // "ulp+1", "ulp-1", "seed", "order"
  double init_ulps = 0;      // ModelConfig::init_perturb_ulps
  uint64_t seed_offset = 0;  // added to the init seed
  uint64_t order_seed = 0;   // DataConfig::order_seed (0 = unchanged)
  int64_t delay_steps = 0;   // LoopConfig::delay_steps: the first optimizer step skipped, as a GradScaler skips one
};
// The five of `ampcheck record` (ulp+1, ulp-1, seed, order, skip); `more` adds a second seed (+2) and a second data
// order (record --more-noise): for a workload whose FP32 training is chaotic (docs/TOLERANCE.md, the calibration
// campaign's spread-count study).
std::vector<NoisePerturbation> noise_perturbations(bool more = false);
engine::RunConfig perturbed(const engine::RunConfig& reference_run, const NoisePerturbation& p);

struct Reference {
  std::string path;
  trajectory::TrajectoryFile file;  // the FP32 run; attributes include reference_key, reference_canonical
  std::vector<double> loss_spread;  // per step
  std::vector<trajectory::LabelledTrajectory> noise;  // the noise runs
};

// Loads and validates a reference. Missing, unreadable, foreign (another key's canonical text) or stale (other
// format) references throw std::runtime_error with a HINT naming `ampcheck record`.
Reference load_reference(const std::string& root, const std::string& device_class, const engine::RunConfig& run,
                         const std::string& suite_hint);

// series/loss_spread of a reference: per step, the largest |loss - reference loss| over its noise runs (each at least
// as long as the reference).
std::vector<double> loss_spread(const trajectory::Trajectory& reference,
                                const std::vector<trajectory::LabelledTrajectory>& noise_runs);

}  // namespace ampcheck::reference
