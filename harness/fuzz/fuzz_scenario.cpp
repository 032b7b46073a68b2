// Fuzz target: the YAML scenario parser (scenario::parse_scenario), as `check` / `run` read a hand-edited file. A
// scenario parsed is UTF-8 and its name, why, strategy and expected error are printable (io/text.h). Its model is
// within the parser's bounds (scenario.h: every dimension, the parameter count) and resolves without an error; where
// it is small (kBuildParameters) it is also built, holds exactly the parameters counted and the modules of its tree,
// and takes one forward pass — a crash in a model's construction (issue 51: n_layer -3000000000) is a finding.
#include "fuzz_support.h"
#include "models/model.h"
#include "scenario/scenario.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <stdexcept>

namespace {

using namespace ampcheck;

// models up to this many parameters are built (gpt micro ~30k, llama-micro ~120k, mlp tiny ~14k): a few ms at -O0
constexpr double kBuildParameters = 1 << 18;

void check_model(const scenario::Scenario& sc) {
  models::ModelConfig r;
  try {
    r = models::resolve_preset(sc.run.model);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz oracle failed: a parsed scenario's model does not resolve: %s\n", e.what());
    std::abort();
  }
  FUZZ_CHECK(r.n_layer >= 1 && r.n_layer <= scenario::kMaxLayers, "n_layer within its bounds");
  FUZZ_CHECK(r.n_embd >= 1 && r.n_embd <= scenario::kMaxWidth, "n_embd within its bounds");
  FUZZ_CHECK(r.vocab_size >= scenario::kMinVocab && r.vocab_size <= scenario::kMaxVocab, "vocab within its bounds");
  FUZZ_CHECK(r.block_size >= 1 && r.block_size <= scenario::kMaxBlockSize, "block_size within its bounds");
  FUZZ_CHECK(r.kind == "mlp" || (r.n_head >= 1 && r.n_head <= scenario::kMaxHeads && r.n_embd % r.n_head == 0),
             "n_head within its bounds, dividing n_embd");
  FUZZ_CHECK(r.kind == "gpt" || (r.mlp_hidden >= 1 && r.mlp_hidden <= scenario::kMaxHidden),
             "mlp_hidden within its bounds");
  const double count = models::parameter_count(r);
  FUZZ_CHECK(count <= static_cast<double>(scenario::kMaxParameters), "the parameter count within its bound");
  const int64_t seq = sc.run.data.seq_len > 0 ? sc.run.data.seq_len : r.block_size;
  FUZZ_CHECK(seq >= 1 && seq <= r.block_size, "seq_len within the model's block_size");
  FUZZ_CHECK(sc.run.data.batch_size * seq <= scenario::kMaxBatchTokens, "a micro-batch's tokens within the bound");
  if (count > kBuildParameters) return;
  std::unique_ptr<models::Model> model;
  try {
    model = models::make_model(sc.run.model);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz oracle failed: a parsed scenario's model does not build: %s\n", e.what());
    std::abort();
  }
  FUZZ_CHECK(static_cast<double>(model->parameter_count()) == count, "the model holds the parameters counted");
  FUZZ_CHECK(model->module_tree().size() == models::module_tree(r).size() && !model->module_tree().empty(),
             "the model's modules are its config's tree");
  // one forward pass on a few tokens: an error is allowed (a pitfall knob may make PyTorch refuse the dtypes), a
  // crash or a sanitizer report is not
  const int64_t T = std::min<int64_t>(seq, 4);
  const at::Tensor tokens =
      at::arange(T + 1, at::TensorOptions().dtype(at::kLong)).remainder(r.vocab_size).unsqueeze(0);
  try {
    at::NoGradGuard no_grad;
    models::ForwardOptions opts;
    opts.training = false;
    const at::Tensor loss = model->loss(tokens.narrow(1, 0, T), tokens.narrow(1, 1, T), opts);
    FUZZ_CHECK(loss.dim() == 0, "the loss is a scalar");
  } catch (const std::exception&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = "fuzz/scenario.yaml";
  scenario::Scenario sc;
  try {
    sc = scenario::parse_scenario(text, path);
  } catch (const std::exception& e) {
    fuzz::check_names_file(e.what(), path);
    return 0;
  }
  FUZZ_CHECK(!sc.run.name.empty(), "a parsed scenario has a name");
  // its text reaches summary.json, the reports and the terminal: printable (the file UTF-8, escapes as \xNN)
  FUZZ_CHECK(io::first_invalid_utf8(sc.text) == std::string::npos, "a scenario parsed is UTF-8 text");
  for (const std::string* s : {&sc.run.name, &sc.why, &sc.expect.error, &sc.run.strategy.name})
    FUZZ_CHECK(io::first_unprintable(*s) == std::string::npos, "a scenario's strings are printable");
  check_model(sc);
  return 0;
}
