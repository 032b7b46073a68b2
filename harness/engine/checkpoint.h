// Checkpoint files: named tensors plus a JSON header, written atomically (temporary file + rename: io/files.h).
// Layout: "AMPCKPT1" | uint64 header length | JSON header {meta, tensors: [{name, dtype, shape, offset, nbytes}]}
// | raw little-endian tensor bytes. Readable without ampcheck (numpy.frombuffer at the given offsets).
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::engine {

struct Checkpoint {
  std::map<std::string, at::Tensor> tensors;  // on the CPU
  nlohmann::json meta;
};

void write_checkpoint(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const nlohmann::json& meta);
Checkpoint read_checkpoint(const std::string& path);

}  // namespace ampcheck::engine

// ---------------------------------------------------------------------------------------------------------------
// Training checkpoints: what a resumed run needs — the model's parameters ("model/<name>"), fp32 masters
// ("master/<i>"), each optimizer's state ("optim/", "optim1/", ...), the precision runtime's (FP8 amax histories),
// the GradScaler's state and the next step (meta). Loading checks every tensor's dtype and shape against the run.

#include "engine/master_weights.h"
#include "engine/optimizer.h"
#include "engine/precision_runtime.h"

#include <ampcheck/amp/grad_scaler.h>

#include <memory>

namespace ampcheck::engine {

// The trainer's live state, by reference; the optional parts are null / empty where the run has none.
struct TrainingState {
  std::vector<models::NamedParameter>& params;
  MasterWeights& masters;
  std::vector<std::unique_ptr<Optimizer>>& optimizers;
  amp::GradScaler* scaler;
  PrecisionRuntime* precision;
  int64_t& next_step;
};

// meta: what the file says of the run that saved it (run name, strategy, optimizer kind); the state adds the rest
void save_training_state(const std::string& path, const TrainingState& state, nlohmann::json meta);
// restore_scaler = false: the GradScaler keeps its fresh state (the "resume without the scaler state" pitfall).
void load_training_state(const std::string& path, TrainingState& state, bool restore_scaler);

}  // namespace ampcheck::engine
