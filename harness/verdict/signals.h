// Signals — what a verdict reads from a trajectory, each compared with the FP32 reference by one documented rule.
//
// Every signal turns (run, reference) into a per-step deviation in the signal's own unit (nats of smoothed loss,
// log of a norm ratio, a fraction of gradient elements, a share of skipped steps). Its allowed deviation comes from
// measured noise: the same metric applied to the reference's noise runs (FP32 runs that differ from it only by a
// ±1-ulp nudge of the initial weights, another init seed or another data order), times k — the largest of them,
// as an envelope over a centred window of the smoothing length. A few signals have a floor in their own
// dimensionless unit where FP32 noise can be exactly zero (norm ratios, element fractions) and skipped steps have
// a fixed share; docs/TOLERANCE.md gives every constant's calibration.
//
// Skipped steps: a step a loss scaler skips delays training by one step by design, so a run's step s is compared
// with the reference at the best of steps s-K..s, K = the steps it skipped before s. Skipping itself is its own
// signal (a run may skip only a small share of its steps).
//
// Signals and their rules (allowed_s = max(k × noise_s, floor)):
//   loss          |smoothed loss − reference's| ≤ allowed; fired & worse at the end & still learning → stalls
//                 ("sheds 40% of the loss the reference shed"), otherwise diverges
//   grad_norm     |log(true grad norm / reference's)|, smoothed: shrunk → stalls, grown → diverges
//   update_norm   |log((update norm / lr) / reference's)| over the steps taken, smoothed: collapsed → stalls,
//                 grown → diverges
//   zero_grads    excess of the zero-element fraction over the reference's, smoothed → stalls (underflow)
//   subnormal_grads  excess of the subnormal fraction: reported, never decides (a subnormal keeps its value at
//                 reduced precision; a correct fp16 master-weights GPT-2 run has 8% — flushed grads are zero_grads)
//   nonfinite_grads, skipped, fp8_saturated, fp8_flushed: counted on the run alone (verdict/events.h)
#pragma once

#include "trajectory/trajectory.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

namespace ampcheck::verdict {

struct Tolerance {
  double k = 6.0;                      // allowed deviation = k × the measured FP32 noise of the same metric
  int64_t window = 10;                 // steps: trailing mean of every per-step metric, and the noise envelope
  double ratio_floor = 1.1;            // grad/update norm ratios within [1/1.1, 1.1] are never flagged
  double fraction_floor = 0.03;        // grad element fractions: an excess below 3 percentage points is never flagged
  double max_skipped_fraction = 0.25;  // a run may skip at most this share of its steps
  double fp8_saturated_floor = 0.25;   // fp8: a cast may clip at most this fraction of its elements on a step
  double fp8_flushed_floor = 0.2;      // fp8: a cast may flush at most this fraction (trailing mean) to zero
};

// One FP32 run that differs from the reference only by a perturbation (its noise), with the perturbation's name.
using NoiseRun = trajectory::LabelledTrajectory;

// The loss signal's shape, which decides its word (verdict/shapes.h reads several signals together): the loss
// excursion — the smoothed loss out of its allowance for a while and back within it until the last step: a transient
// (a loss spike the run recovered from), not a stall — nothing was lost at the end. Named "loss spike at step S
// (+R nats), recovered by step T" where the run's smoothed loss rose above its level before the excursion by more
// than the allowance, and it says whether FP32 spiked too over the same steps (the reference's smoothed loss rose by
// more than the allowance as well). A loss still out at the last step is no excursion: the signal's own rule decides
// (stalls / diverges) and the message says it did not come back. docs/TOLERANCE.md: the calibration.
// `recovered` is false for a signal that did not fire or is still out at the last step.
struct LossExcursion {
  bool recovered = false;
  int64_t out_from = -1;          // first step beyond the allowance
  int64_t back_from = -1;         // recovered: first step of the final stretch within the allowance (to the last step)
  int64_t last_step = -1;         // the last step compared
  double last_margin = NAN;       // |deviation| / allowed at the last step
  double last_deviation = NAN;    // nats, run - reference (smoothed), at the last step
  bool run_spiked = false;        // the run's smoothed loss rose above its level before the excursion by > allowed
  int64_t spike_step = -1;        // run_spiked: the step of the run's highest raw loss in the excursion
  double run_rise = NAN;          // nats: the run's smoothed peak above its smoothed level before the excursion
  bool reference_spiked = false;  // the reference's smoothed loss rose by > allowed over the same steps
  int64_t reference_spike_step = -1;
  double reference_rise = NAN;  // nats, as run_rise for the reference
};

// What a signal's clause says beyond its comparison's fields, one type per kind of signal: the numbers a signal
// computes for its words, which verdict/words.h makes from them (the clause is the comparison's `message`).
struct LossFacts {
  bool no_steps = false, no_noise = false;  // why the loss was not judged
  LossExcursion excursion;                  // fired: out and back within the allowance
  double shed_run = NAN, shed_ref = NAN;    // nats of smoothed loss shed from the first window to the last step
  bool shed_named = false;                  // the reference shed more than the allowance: the share is named
  int64_t last_step = -1;
  double last_deviation = NAN;  // nats, skip-aligned (as the signal compares), at the last step
  double last_margin = NAN;     // |deviation| / allowed at the last step
};
struct RatioFacts {
  bool updates = false;  // update_norm (per unit of lr), else grad_norm
};
struct FractionFacts {
  bool zero = false;  // zero_grads, else subnormal_grads
};
struct NonfiniteFacts {
  int64_t applied = 0;  // steps the optimizer took with non-finite grads
  int64_t with = 0;     // steps with any, taken or skipped
};
struct SkippedFacts {
  int64_t skipped = 0, steps = 0;
};
struct Fp8Facts {
  bool saturated = false;  // fp8_saturated, else fp8_flushed
  bool casts = false;      // the run has FP8 casts
  std::string cast;        // judged: the cast at the max step ("?" if none)
  double scale = NAN;      // its scale at the max step
};
using SignalFacts =
    std::variant<std::monostate, LossFacts, RatioFacts, FractionFacts, NonfiniteFacts, SkippedFacts, Fp8Facts>;

// One signal's comparison with the reference: what the verdict found and what a run summary's row keeps of it
// (report::ScenarioSummary::signals, summary.json's "signals": visit_fields below, docs/SUMMARY_SCHEMA.md).
struct SignalComparison {
  std::string name;     // loss | grad_norm | update_norm | zero_grads | subnormal_grads | nonfinite_grads | skipped |
                        // fp8_saturated | fp8_flushed
  std::string unit;     // nats | log-ratio | fraction | steps | share
  bool judged = false;  // false when the run or the reference lacks the column (message says why)
  bool fired = false;
  bool decides = true;      // false: reported (and shown when beyond its allowance) but never sets the verdict
  std::string verdict;      // what a firing means: stalls | diverges | nonfinite
  int64_t first_step = -1;  // first step beyond the allowed deviation
  int64_t max_step = -1;
  double max_margin = 0;   // max over steps of |deviation| / allowed (≤ 1: within; > 1: fired)
  double deviation = NAN;  // at max_step, in the signal's unit (signed)
  double allowed = NAN;    // at max_step
  double noise = NAN;      // at max_step: the largest noise-run deviation (before × k)
  double run_value = NAN;  // at max_step: the run's smoothed value (loss, norm, fraction, share)
  double reference_value = NAN;
  std::string message;  // one clause: "updates 0.03x the reference's from step 12 (allowed 0.95x..1.05x)" (words.h)
};

// A signal as judged: its comparison and the per-step series behind it (the result file's margin_<name>; a run
// summary's row keeps the comparison only).
struct SignalResult : SignalComparison {
  std::vector<double> margin_series;   // per step: |deviation| / allowed, NaN where not measured
  std::vector<double> allowed_series;  // per step, in the signal's unit
  // the loss only: the run's and the reference's smoothed loss it compared, per step (loss_excursion reads them, the
  // verdict's curves are them); empty for the other signals
  std::vector<double> run_smoothed, reference_smoothed;
  SignalFacts facts;  // what its clause says beyond the comparison (verdict/words.h)
};

// The comparison's one description: each field once, with its JSON name (io/record_json.h derives summary.json's
// writer and reader from it). `required`: a reader's error when absent; every other field keeps its default.
template <class V>
void visit_fields(SignalComparison& g, V& v) {
  v.required("name", g.name);
  v("unit", g.unit);
  v("judged", g.judged);
  v("fired", g.fired);
  v("decides", g.decides);
  v("verdict", g.verdict);
  v("first_step", g.first_step);
  v("max_step", g.max_step);
  v("max_margin", g.max_margin);
  v("deviation", g.deviation);
  v("allowed", g.allowed);
  v("noise", g.noise);
  v("run_value", g.run_value);
  v("reference_value", g.reference_value);
  v("message", g.message);
}

std::vector<double> trailing_mean(const std::vector<double>& x, int64_t window);  // non-finite entries skipped

// The skip-aware comparison index range: for run step s, reference steps [s - K_s, s] with K_s the run's skipped
// steps before s (capped at s).
std::vector<int64_t> skipped_before(const trajectory::Trajectory& run);

// Each signal computes its numbers and its facts; its message is left empty: verdict/words.h `clause` makes it.
SignalResult loss_signal(const trajectory::Trajectory& run, const trajectory::Trajectory& ref,
                         const std::vector<NoiseRun>& noise, const Tolerance& tol);

// A fired loss signal's excursion. `loss` must be loss_signal(run, ref, ...)'s result (its margin series); the
// final stretch within the allowance must last at least tol.window steps to count as recovered.
LossExcursion loss_excursion(const SignalResult& loss, const trajectory::Trajectory& run,
                             const trajectory::Trajectory& ref, const Tolerance& tol);

SignalResult norm_ratio_signal(int column, const trajectory::Trajectory& run, const trajectory::Trajectory& ref,
                               const std::vector<NoiseRun>& noise, const Tolerance& tol);
SignalResult fraction_signal(int column, const trajectory::Trajectory& run, const trajectory::Trajectory& ref,
                             const std::vector<NoiseRun>& noise, const Tolerance& tol);

// Fills margins, first/max step and the values at the max step from a smoothed deviation and its allowed series.
// `magnitude` maps a deviation to the part that counts (|d|, or max(d, 0) for one-sided signals).
template <class M>
void judge_series(SignalResult& r, const std::vector<double>& dev, const std::vector<double>& allowed,
                  const std::vector<double>& noise, M magnitude) {
  r.margin_series.assign(dev.size(), std::numeric_limits<double>::quiet_NaN());
  r.allowed_series = allowed;
  for (size_t s = 0; s < dev.size(); ++s) {
    if (std::isnan(dev[s]) || !std::isfinite(allowed[s])) continue;
    const double m = magnitude(dev[s]) / allowed[s];
    r.margin_series[s] = m;
    r.judged = true;
    if (m > r.max_margin || r.max_step < 0) {
      r.max_margin = m;
      r.max_step = static_cast<int64_t>(s);
      r.deviation = dev[s];
      r.allowed = allowed[s];
      r.noise = s < noise.size() ? noise[s] : std::numeric_limits<double>::quiet_NaN();
    }
    if (m > 1.0 && r.first_step < 0) r.first_step = static_cast<int64_t>(s);
  }
  r.fired = r.first_step >= 0;
}

}  // namespace ampcheck::verdict
