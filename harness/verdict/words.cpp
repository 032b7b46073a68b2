// Words: each signal's clause from its numbers (words.h).
#include "verdict/words.h"

#include "verdict/kind.h"

#include "io/text.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace ampcheck::verdict {

namespace {

std::string signed_nats(double v) { return (v >= 0 ? "+" : "") + io::number_text(v, 3) + " nats"; }
const char* side(double deviation) { return deviation > 0 ? "above" : "below"; }

// ---------------------------------------------------------------------------------------------------------------
// one clause per kind of signal

std::string loss_clause(const SignalResult& r, const LossFacts& f) {
  if (f.no_noise) return "loss not judged: the reference has no noise runs";
  if (f.no_steps) return "loss not judged: no steps";
  std::ostringstream m;
  if (!r.fired) {
    m << "loss within " << io::number_text(r.max_margin, 2) << " of its allowed deviation (step " << r.max_step << ")";
  } else if (f.excursion.recovered) {
    m << describe(f.excursion) << "; at most " << io::number_text(std::abs(r.deviation), 3) << " nats "
      << side(r.deviation) << " the reference (step " << r.max_step << ", " << io::number_text(r.max_margin, 3)
      << "x the allowed " << io::number_text(r.allowed, 3) << ")";
  } else if (is(r.verdict, Kind::Stalls)) {
    m << "loss ";
    if (f.shed_named)
      m << "sheds " << pct(f.shed_run / f.shed_ref) << " of the loss the reference shed ("
        << io::number_text(f.shed_run, 3) << " of " << io::number_text(f.shed_ref, 3) << " nats); ";
    m << "up to " << io::number_text(std::abs(r.deviation), 3) << " nats " << side(r.deviation)
      << " the reference (step " << r.max_step << ", " << io::number_text(r.max_margin, 3) << "x the allowed "
      << io::number_text(r.allowed, 3) << "; out from step " << r.first_step
      << "), not recovered: " << io::number_text(f.last_deviation, 3) << " nats above at the last step (" << f.last_step
      << ", " << io::number_text(f.last_margin, 2) << "x the allowed)";
  } else {
    m << "loss " << side(r.deviation) << " the reference by " << io::number_text(std::abs(r.deviation), 3)
      << " nats at step " << r.max_step << ", " << io::number_text(r.max_margin, 3) << "x the allowed "
      << io::number_text(r.allowed, 3) << " (out from step " << r.first_step << ")";
  }
  return m.str();
}

std::string ratio_clause(const SignalResult& r, const RatioFacts& f) {
  const std::string what = f.updates ? "updates" : "true grad norm";
  if (!r.judged) return what + " not judged: not measured in the run or the reference";
  std::ostringstream m;
  if (r.fired)
    m << what << " " << io::number_text(std::exp(r.deviation), 3) << "x the reference's at step " << r.max_step
      << " (allowed " << io::number_text(std::exp(-r.allowed), 3) << "x.." << io::number_text(std::exp(r.allowed), 3)
      << "x; out from step " << r.first_step << ")";
  else
    m << what << " within " << io::number_text(r.max_margin, 2) << " of its allowed deviation ("
      << io::number_text(std::exp(r.deviation), 3) << "x at step " << r.max_step << ")";
  return m.str();
}

std::string fraction_clause(const SignalResult& r, const FractionFacts& f) {
  const std::string what = f.zero ? "zero" : "subnormal";
  if (!r.judged) return what + " grad elements not judged: not measured in the run or the reference";
  std::ostringstream m;
  if (r.fired)
    m << pct(r.run_value) << " of grad elements " << what << " vs " << pct(r.reference_value) << " in FP32 at step "
      << r.max_step << " (excess allowed " << pct(r.allowed) << "; out from step " << r.first_step << ")"
      << (f.zero ? "" : " (a subnormal keeps its value at reduced precision)");
  else
    m << what << " grad elements " << pct(r.run_value) << " vs " << pct(r.reference_value) << " in FP32";
  return m.str();
}

std::string nonfinite_clause(const SignalResult& r, const NonfiniteFacts& f) {
  std::ostringstream m;
  if (r.fired)
    m << "non-finite grads applied by the optimizer at " << f.applied << " step(s), first at step " << r.first_step;
  else if (f.with > 0)
    m << f.with << " step(s) with non-finite grads, every one skipped";
  else
    m << "no non-finite grads";
  return m.str();
}

std::string skipped_clause(const SignalResult& r, const SkippedFacts& f) {
  std::ostringstream m;
  m << "skipped " << f.skipped << " of " << f.steps << " steps (" << pct(r.deviation) << "; at most " << pct(r.allowed)
    << " allowed)";
  return m.str();
}

std::string fp8_clause(const SignalResult& r, const Fp8Facts& f) {
  if (!f.casts) return "no FP8 casts";
  if (!r.judged)
    return std::string("FP8 ") + (f.saturated ? "saturation" : "flushing") + " not measured (no probed step)";
  std::ostringstream m;
  if (r.fired)
    m << "FP8: " << pct(r.run_value) << " of " << f.cast << (f.saturated ? " saturated" : " flushed to zero")
      << (f.saturated ? " at step " : " (trailing mean) at step ") << r.max_step << " (scale "
      << io::number_text(f.scale, 3) << "; allowed " << pct(r.allowed) << ", out from step " << r.first_step << ")";
  else
    m << "FP8 casts " << (f.saturated ? "saturated" : "flushed") << " at most " << pct(r.run_value) << " (" << f.cast
      << ", step " << r.max_step << ")";
  return m.str();
}

}  // namespace

std::string clause(const SignalResult& s) {
  struct Say {
    const SignalResult& s;
    std::string operator()(std::monostate) const { return ""; }
    std::string operator()(const LossFacts& f) const { return loss_clause(s, f); }
    std::string operator()(const RatioFacts& f) const { return ratio_clause(s, f); }
    std::string operator()(const FractionFacts& f) const { return fraction_clause(s, f); }
    std::string operator()(const NonfiniteFacts& f) const { return nonfinite_clause(s, f); }
    std::string operator()(const SkippedFacts& f) const { return skipped_clause(s, f); }
    std::string operator()(const Fp8Facts& f) const { return fp8_clause(s, f); }
  };
  return std::visit(Say{s}, s.facts);
}

void set_messages(std::vector<SignalResult>& signals) {
  for (auto& s : signals) s.message = clause(s);
}

std::string pct(double f) {
  std::ostringstream os;
  os.precision(f >= 0.1 ? 3 : 2);
  os << 100.0 * f << "%";
  return os.str();
}

std::string describe(const LossExcursion& e) {
  if (!e.recovered) return "";
  std::ostringstream m;
  if (e.run_spiked)
    m << "loss spike at step " << e.spike_step << " (" << signed_nats(e.run_rise)
      << " over its level before, smoothed), recovered by step " << e.back_from;
  else
    m << "loss out of its allowance from step " << e.out_from << ", recovered by step " << e.back_from;
  m << ": within the allowance from there to the last step (" << e.last_step << ": "
    << io::number_text(std::abs(e.last_deviation), 3) << " nats " << (e.last_deviation >= 0 ? "above" : "below")
    << " the reference, " << io::number_text(e.last_margin, 2) << " of the allowed)";
  if (e.run_spiked) {
    if (e.reference_spiked)
      m << "; FP32 spiked too (" << signed_nats(e.reference_rise) << " at step " << e.reference_spike_step << ")";
    else if (std::isfinite(e.reference_rise))
      m << "; FP32 did not spike (its smoothed loss rose at most "
        << io::number_text(std::max(0.0, e.reference_rise), 3) << " nats over the same steps)";
  }
  return m.str();
}

}  // namespace ampcheck::verdict
