// Words — every signal's clause, made in one place from the numbers the signal computed (its comparison and its
// facts, verdict/signals.h): the signals compute, the words say. A clause is the signal's `message`, the piece of a
// verdict's message that names it ("updates 0.03x the reference's at step 12 (allowed 0.952x..1.05x; out from
// step 4)"); verdict::judge makes them in one pass once every signal is computed.
#pragma once

#include "verdict/signals.h"

#include <string>
#include <vector>

namespace ampcheck::verdict {

// The signal's clause from its comparison and its facts ("" for a SignalResult without facts).
std::string clause(const SignalResult& s);
// Every signal's message set to its clause, in one pass.
void set_messages(std::vector<SignalResult>& signals);

// A share as a percent with two significant digits below 10%, three from there: 0.0012 -> "0.12%".
std::string pct(double f);

// "loss spike at step 31 (+0.42 nats over its level before), recovered by step 52: within the allowance from there
// to the last step (59: 0.06 nats above, 0.4 of the allowed); FP32 spiked too (+0.38 nats at step 30)"; "" for an
// excursion that did not recover.
std::string describe(const LossExcursion& e);

}  // namespace ampcheck::verdict
