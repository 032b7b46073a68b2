// Scenario parsing is strict: each kind of mistake produces a ScenarioError naming file:line:column and the field
// path (unknown keys, wrong types, non-finite amounts, injection steps outside the run, parameter globs matching
// nothing, names that are not plain file names); every scenario shipped under scenarios/ parses, and every suite
// names existing files.
#include "inject/injection.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "reference/reference_store.h"
#include "scenario/scenario.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace ampcheck::scenario;

namespace {
const char* kBase = R"(name: t
why: "a test"
model: {kind: gpt, preset: micro}
strategy: fp16-autocast
)";

std::string error_of(const std::string& text) {
  try {
    parse_scenario(text, "scenarios/t.yaml");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(ScenarioParse, MinimalScenarioResolvesDefaults) {
  Scenario s = parse_scenario(kBase, "t.yaml");
  EXPECT_EQ(s.run.name, "t");
  EXPECT_EQ(s.run.strategy.name, "fp16-autocast");
  EXPECT_EQ(s.run.strategy.autocast, at::kHalf);
  EXPECT_EQ(s.expect.verdict, "tracks");
  EXPECT_EQ(s.text, kBase);
}

TEST(ScenarioParse, UnknownKeyNamesFileLineAndField) {
  const std::string e = error_of(std::string(kBase) + "optimizer: {kind: adamw, lrr: 0.1}\n");
  EXPECT_NE(e.find("scenarios/t.yaml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer.lrr: unknown key"), std::string::npos) << e;
}

// FP8 variants: fields parsed, the strategy named after them; bad values and impossible shapes refused with the field.
TEST(ScenarioParse, Fp8VariantsAndTheirErrors) {
  const std::string base = "name: t\nwhy: w\nmodel: {kind: gpt, preset: micro}\ndata: {batch_size: 8, seq_len: 32}\n";
  const auto sc =
      parse_scenario(base + "strategy: {preset: fp8, fp8: {scaling: delayed, history: 32, grads: e4m3, layers: all}}\n",
                     "scenarios/t.yaml");
  ASSERT_TRUE(sc.run.strategy.fp8.has_value());
  EXPECT_EQ(sc.run.strategy.fp8->scaling, ampcheck::engine::Fp8Scaling::Delayed);
  EXPECT_EQ(sc.run.strategy.fp8->history, 32);
  EXPECT_FALSE(sc.run.strategy.fp8->hybrid);
  EXPECT_EQ(sc.run.strategy.name, "fp8-delayed-h32-e4m3grads-all");
  EXPECT_EQ(sc.run.strategy.autocast, at::kBFloat16);
  EXPECT_NE(error_of(base + "strategy: {preset: fp8, fp8: {scaling: stale}}\n").find("strategy.fp8.scaling"),
            std::string::npos);
  EXPECT_NE(error_of(base + "strategy: {preset: fp8, autocast: fp16}\n")
                .find("strategy.autocast: FP8 matmuls run beside bf16 autocast"),
            std::string::npos)
      << error_of(base + "strategy: {preset: fp8, autocast: fp16}\n");
  // at::_scaled_mm: batch x seq_len must be a multiple of 16
  const std::string odd =
      "name: t\nwhy: w\nmodel: {kind: gpt, preset: micro}\ndata: {batch_size: 3, seq_len: 31}\nstrategy: fp8\n";
  EXPECT_NE(error_of(odd).find("multiple of 16: n_embd 32, batch x seq_len per rank 93"), std::string::npos)
      << error_of(odd);
}

TEST(ScenarioParse, WrongTypeNamesTheFieldAndTheValue) {
  const std::string e = error_of(std::string(kBase) + "optimizer:\n  lr: fast\n");
  EXPECT_NE(e.find("scenarios/t.yaml:6:7: optimizer.lr: expected a number, got 'fast'"), std::string::npos) << e;
}

TEST(ScenarioParse, UnknownStrategyListsTheKnownOnes) {
  const std::string e = error_of("name: t\nwhy: w\nstrategy: fp4\n");
  EXPECT_NE(e.find("scenarios/t.yaml:3:11: strategy: unknown strategy 'fp4'"), std::string::npos) << e;
  EXPECT_NE(e.find("bf16-autocast"), std::string::npos) << e;
  EXPECT_NE(e.find("fp8-delayed"), std::string::npos) << e;
}

TEST(ScenarioParse, ExpectedWarningsAreKnownSignalsInAList) {
  const auto sc = parse_scenario(std::string(kBase) + "expect: {verdict: tracks, warnings: [zero_grads, precision]}\n",
                                 "scenarios/t.yaml");
  EXPECT_EQ(sc.expect.warnings, (std::vector<std::string>{"zero_grads", "precision"}));
  std::string e = error_of(std::string(kBase) + "expect: {verdict: tracks, warnings: [zero_grad]}\n");
  EXPECT_NE(e.find("warnings[0]: expected one of zero_grads, subnormal_grads"), std::string::npos) << e;
  EXPECT_NE(e.find("got 'zero_grad'"), std::string::npos) << e;
  e = error_of(std::string(kBase) + "expect: {verdict: tracks, warnings: zero_grads}\n");
  EXPECT_NE(e.find("expect.warnings: expected a list of warning signals"), std::string::npos) << e;
}

TEST(ScenarioParse, ImpossibleCombinationsAreRefused) {
  EXPECT_NE(error_of("name: t\nwhy: w\nstrategy: {preset: fp32, master_weights: true}\n").find("master_weights"),
            std::string::npos);
  EXPECT_NE(error_of("name: t\nwhy: w\nstrategy: bf16-autocast\ntrain: {unscale_each_micro_batch: true}\n")
                .find("needs a loss scaler"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "expect: {verdict: error}\n").find("needs expect.error"), std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "optimizer: {kind: sgd, fused: true}\n").find("fused"), std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "train: {steps: 0}\n").find("train.steps: must be > 0"), std::string::npos);
  EXPECT_NE(error_of("name: t\nwhy: w\nstrategy: {preset: fp16-autocast, scaler: {growth_factor: 0.5}}\n")
                .find("strategy.scaler.growth_factor: must be > 1.0"),
            std::string::npos);
}

// The data must fit the model: the parser says so naming the file and the field (the engine only asserts it).
TEST(ScenarioParse, DataThatDoesNotFitTheModelIsRefused) {
  const std::string vocab = error_of(std::string(kBase) + "data: {vocab_size: 100000}\n");
  EXPECT_NE(vocab.find("scenarios/t.yaml"), std::string::npos) << vocab;
  EXPECT_NE(vocab.find("data.vocab_size: 100000 exceeds the model's vocab"), std::string::npos) << vocab;
  const std::string seq = error_of(std::string(kBase) + "data: {seq_len: 100000}\n");
  EXPECT_NE(seq.find("data.seq_len: 100000 exceeds the model's block_size"), std::string::npos) << seq;
  EXPECT_EQ(error_of(std::string(kBase) + "data: {seq_len: 8}\n"), "(no error)");
}

TEST(ScenarioParse, MissingWhyAndNameAreErrors) {
  EXPECT_NE(error_of("name: t\nstrategy: fp32\n").find("why: required"), std::string::npos);
  EXPECT_NE(error_of("why: w\nstrategy: fp32\n").find("name: required"), std::string::npos);
  EXPECT_NE(error_of("name: t\nwhy: w\n").find("strategy: required"), std::string::npos);
}

TEST(ScenarioParse, YamlSyntaxErrorHasALine) {
  const std::string e = error_of("name: t\nwhy: a: b\n");
  EXPECT_NE(e.find("scenarios/t.yaml:2:"), std::string::npos) << e;
}

TEST(ScenarioParse, InjectionsParseWithTheirValues) {
  Scenario s = parse_scenario(std::string(kBase) +
                                  "inject:\n  - {kind: grad, steps: [3, 9], value: -inf, params: 'h.*'}\n"
                                  "  - {kind: underflow, steps: [1], factor: 1.0e-8}\n",
                              "t.yaml");
  ASSERT_EQ(ampcheck::inject::injections(s.run).size(), 2u);
  EXPECT_EQ(ampcheck::inject::injections(s.run)[0].steps, (std::vector<int64_t>{3, 9}));
  EXPECT_EQ(ampcheck::inject::injections(s.run)[0].value, -INFINITY);
  EXPECT_EQ(ampcheck::inject::injections(s.run)[1].factor, 1e-8);
  EXPECT_NE(error_of(std::string(kBase) + "inject:\n  - {kind: underflow, steps: [1]}\n").find("factor: required"),
            std::string::npos);
}

TEST(ScenarioFiles, EveryShippedScenarioAndSuiteParses) {
  const std::string dir = std::string(AMPCHECK_SOURCE_DIR) + "/scenarios";
  int n = 0;
  // every folder's (sensitivity/, llama/, fp8/, ...): the bounds on the numbers that size a run refuse none of them
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().extension() != ".yaml" || e.path().parent_path().filename() == "suites") continue;
    try {
      load_scenario(e.path().string());
    } catch (const std::exception& x) {
      ADD_FAILURE() << e.path() << ": " << x.what();
    }
    ++n;
  }
  EXPECT_GT(n, 150);
  for (const auto& e : std::filesystem::directory_iterator(dir + "/suites")) {
    for (const auto& f : load_suite(dir, e.path().stem().string()))
      EXPECT_TRUE(std::filesystem::exists(f)) << e.path() << " names a missing scenario " << f;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// training-loop pitfall knobs, injection sites, and the values refused

TEST(ScenarioParse, LoopPitfallKnobsDefaultToTheCorrectLoopAndParse) {
  const Scenario d = parse_scenario(kBase, "t.yaml");
  EXPECT_TRUE(d.run.loop.divide_loss_by_micro_batches);
  EXPECT_TRUE(d.run.loop.step_through_scaler);
  EXPECT_TRUE(d.run.loop.scale_loss);
  EXPECT_TRUE(d.run.loop.zero_grad);
  const Scenario s = parse_scenario(std::string(kBase) +
                                        "train: {divide_loss_by_micro_batches: false, step_through_scaler: false,"
                                        " scale_loss: false, zero_grad: false}\n",
                                    "t.yaml");
  EXPECT_FALSE(s.run.loop.divide_loss_by_micro_batches);
  EXPECT_FALSE(s.run.loop.step_through_scaler);
  EXPECT_FALSE(s.run.loop.scale_loss);
  EXPECT_FALSE(s.run.loop.zero_grad);
  const std::string e = error_of(std::string(kBase) + "train: {zero_grad: sometimes}\n");
  EXPECT_NE(e.find("scenarios/t.yaml:5:20: train.zero_grad: expected true or false, got 'sometimes'"),
            std::string::npos)
      << e;
}

TEST(ScenarioParse, InjectionStepOutsideTheRunIsAnError) {
  const std::string train = std::string(kBase) + "train: {steps: 20}\n";
  std::string e = error_of(train + "inject:\n  - {kind: grad, steps: [3, 20]}\n");
  EXPECT_NE(e.find("scenarios/t.yaml:7:29: inject[0].steps[1]: expected 0 <= step < train.steps (20), got 20"),
            std::string::npos)
      << e;
  e = error_of(train + "inject:\n  - {kind: grad, steps: [-1]}\n");
  EXPECT_NE(e.find("inject[0].steps[0]: expected 0 <= step < train.steps (20), got -1"), std::string::npos) << e;
  e = error_of(train + "inject:\n  - {kind: nan_loss, from: 25}\n");
  EXPECT_NE(e.find("scenarios/t.yaml:7:28: inject[0].from: expected 0 <= step < train.steps (20), got 25"),
            std::string::npos)
      << e;
  e = error_of(train + "inject:\n  - {kind: grad, steps: [two]}\n");
  EXPECT_NE(e.find("inject[0].steps[0]: expected an integer, got 'two'"), std::string::npos) << e;
  // the default train.steps (100) bounds a scenario without a train section
  EXPECT_NE(error_of(std::string(kBase) + "inject:\n  - {kind: grad, steps: [100]}\n").find("train.steps (100)"),
            std::string::npos);
  EXPECT_NO_THROW(parse_scenario(train + "inject:\n  - {kind: grad, steps: [0, 19], from: 19}\n", "t.yaml"));
}

TEST(ScenarioParse, InjectionGlobMatchingNoParameterListsTheModelsNames) {
  const std::string e = error_of(std::string(kBase) + "inject:\n  - {kind: grad, steps: [1], params: 'h.2.*'}\n");
  EXPECT_NE(e.find("scenarios/t.yaml:6:38: inject[0].params: 'h.2.*' matches no parameter of the model"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("gpt micro has 28: wte, wpe, h.0.ln_1.weight,"), std::string::npos) << e;
  EXPECT_NE(e.find("..., ln_f.weight, ln_f.bias)"), std::string::npos) << e;
  const std::string mlp = "name: t\nwhy: w\nmodel: {kind: mlp, preset: tiny}\nstrategy: fp32\n";
  const std::string e2 = error_of(mlp + "inject:\n  - {kind: grad, steps: [1], params: 'h.*'}\n");
  EXPECT_NE(e2.find("mlp tiny has 5: embed, fc.0.weight, fc.0.bias, head.weight, head.bias)"), std::string::npos) << e2;
  EXPECT_NO_THROW(parse_scenario(mlp + "inject:\n  - {kind: grad, steps: [1], params: 'fc.*'}\n", "t.yaml"));
  EXPECT_NO_THROW(parse_scenario(std::string(kBase) + "inject:\n  - {kind: grad, steps: [1], params: 'h.1.*'}\n", "t"));
}

TEST(ScenarioModel, GptParameterNamesAreTheBuiltModelsNamesInOrder) {
  for (const char* preset : {"micro", "nano"}) {
    ampcheck::models::ModelConfig m;
    m.kind = "gpt";
    m.preset = preset;
    m = ampcheck::models::resolve_preset(m);
    const auto model = ampcheck::models::make_model(m);
    std::vector<std::string> built;
    for (const auto& p : model->parameters()) built.push_back(p.name);
    EXPECT_EQ(ampcheck::models::Gpt::parameter_names(m), built) << "preset " << preset;
  }
}

TEST(ScenarioParse, NameMustBeAPlainFileName) {
  for (const char* bad : {"../x", "a/b", ".", "..", "/abs", "a\\\\b"}) {
    const std::string e = error_of(std::string("name: \"") + bad + "\"\nwhy: w\nstrategy: fp32\n");
    EXPECT_NE(e.find("scenarios/t.yaml:1:7: name: '"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("is not a plain file name"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_NE(error_of("name: \"\"\nwhy: w\nstrategy: fp32\n").find("name: required"), std::string::npos);
  EXPECT_NO_THROW(parse_scenario("name: fp16-autocast.v2_b\nwhy: w\nstrategy: fp32\n", "t.yaml"));
}

TEST(ScenarioParse, NonFiniteNumbersAreRefusedWhereAnAmountIsMeant) {
  const std::string base = "name: t\nwhy: w\nmodel: {kind: gpt, preset: micro}\n";
  const std::pair<std::string, std::string> cases[] = {
      {"optimizer: {lr: .inf}\nstrategy: fp32\n", "optimizer.lr: expected a finite number, got '.inf'"},
      {"optimizer: {weight_decay: .nan}\nstrategy: fp32\n", "optimizer.weight_decay: expected a finite number"},
      {"optimizer: {eps: -.inf}\nstrategy: fp32\n", "optimizer.eps: expected a finite number, got '-.inf'"},
      {"optimizer: {betas: [.nan, 0.95]}\nstrategy: fp32\n", "optimizer.betas[0]: expected a finite number"},
      {"optimizer: {betas: [0.9, 1.5]}\nstrategy: fp32\n", "optimizer.betas[1]: must be in [0, 1)"},
      {"optimizer: {betas: [0.9, x]}\nstrategy: fp32\n", "optimizer.betas[1]: expected a number, got 'x'"},
      {"schedule: {min_lr_ratio: .nan}\nstrategy: fp32\n", "schedule.min_lr_ratio: expected a finite number"},
      {"train: {clip: {max_norm: .inf}}\nstrategy: fp32\n", "train.clip.max_norm: expected a finite number"},
      {"train: {two_optimizers: true, aux_loss_weight: .inf}\nstrategy: fp32\n",
       "train.aux_loss_weight: expected a finite"},
      {"strategy: {preset: fp16-autocast, scaler: {init_scale: .inf}}\n",
       "strategy.scaler.init_scale: expected a finite"},
      {"strategy: {preset: fp16-autocast, scaler: {growth_factor: .inf}}\n",
       "strategy.scaler.growth_factor: expected a"},
      {"strategy: {preset: fp16-autocast, scaler: {backoff_factor: -.inf}}\n",
       "strategy.scaler.backoff_factor: expected"},
      {"strategy: fp32\ninject:\n  - {kind: activation, steps: [1], factor: .inf}\n",
       "inject[0].factor: expected a finite"},
      {"strategy: fp32\ninject:\n  - {kind: underflow, steps: [1], factor: .nan}\n",
       "inject[0].factor: expected a finite"},
      {"strategy: fp32\ntolerance: {k: .inf}\n", "tolerance.k: expected a finite number"},
      {"strategy: fp32\ntolerance: {ratio_floor: .nan}\n", "tolerance.ratio_floor: expected a finite number"},
      {"model: {kind: gpt, preset: micro, dropout: .nan}\nstrategy: fp32\n", "model.dropout: expected a finite number"},
  };
  for (const auto& [yaml, want] : cases) {
    const std::string text = yaml.rfind("model:", 0) == 0 ? "name: t\nwhy: w\n" + yaml : base + yaml;
    const std::string e = error_of(text);
    EXPECT_NE(e.find(want), std::string::npos) << "for\n" << text << "want: " << want << "\ngot:  " << e;
  }
  // the planted gradient value is the one number that may be non-finite
  for (const char* v : {"inf", "-inf", "nan"})
    EXPECT_NO_THROW(
        parse_scenario(base + "strategy: fp32\ninject:\n  - {kind: grad, steps: [1], value: " + v + "}\n", "t.yaml"))
        << v;
}

TEST(ScenarioParse, ActivationSiteParsesAndIsCheckedAgainstTheModel) {
  const std::string inj = std::string(kBase) + "inject:\n  - {kind: activation, steps: [1], factor: 1.0e5";
  EXPECT_EQ(ampcheck::inject::injections(parse_scenario(inj + "}\n", "t").run)[0].at,
            ampcheck::models::ActivationSite::Residual);
  const Scenario s = parse_scenario(inj + ", at: mlp_input, block: 1}\n", "t");
  EXPECT_EQ(ampcheck::inject::injections(s.run)[0].at, ampcheck::models::ActivationSite::MlpInput);
  EXPECT_EQ(ampcheck::inject::injections(s.run)[0].block, 1);
  std::string e = error_of(inj + ", at: logits}\n");
  EXPECT_NE(e.find("inject[0].at: 'logits' is not one of: residual, mlp_input"), std::string::npos) << e;
  e = error_of(inj + ", block: 2}\n");
  EXPECT_NE(e.find("inject[0].block: expected 0 <= block < the model's 2 blocks (n_layer), got 2"), std::string::npos)
      << e;
  e = error_of(
      "name: t\nwhy: w\nmodel: {kind: mlp, preset: tiny}\nstrategy: fp32\n"
      "inject:\n  - {kind: activation, steps: [1], factor: 10, at: mlp_input}\n");
  EXPECT_NE(
      e.find("inject[0].at: mlp_input is a site of the gpt's and llama's blocks; the mlp model has only residual"),
      std::string::npos)
      << e;
}

TEST(ScenarioParse, LlamaFieldsParseAndAreRefusedElsewhere) {
  const std::string head = "name: t\nwhy: w\nstrategy: fp32\nmodel: ";
  const Scenario s = parse_scenario(head +
                                        "{kind: llama, preset: llama-micro, n_kv_head: 1, rope_theta: 5.0e+5, "
                                        "tie_embeddings: true, attention: eager, softmax_fp32: false, "
                                        "rope_dtype: bf16, rmsnorm_fp32: false, logits_fp32: false}\n",
                                    "t");
  EXPECT_EQ(s.run.model.kind, "llama");
  EXPECT_EQ(s.run.model.n_kv_head, 1);
  EXPECT_EQ(s.run.model.tie_embeddings, 1);
  EXPECT_FALSE(s.run.model.sdpa);
  EXPECT_FALSE(s.run.model.softmax_fp32);
  EXPECT_EQ(s.run.model.rope_dtype, "bf16");
  std::string e = error_of(head + "{kind: gpt, preset: micro, rope_dtype: bf16}\n");
  EXPECT_NE(e.find("model.rope_dtype: only for kind llama"), std::string::npos) << e;
  e = error_of(head + "{kind: llama, preset: llama-micro, softmax_fp32: false}\n");
  EXPECT_NE(e.find("model.softmax_fp32: the softmax pitfall is in the eager attention: add attention: eager"),
            std::string::npos)
      << e;
  e = error_of(head + "{kind: llama, preset: llama-micro, n_kv_head: 3}\n");
  EXPECT_NE(e.find("n_kv_head (3) must divide n_head (4)"), std::string::npos) << e;
}

TEST(ScenarioParse, DistributedSectionIsParsedAndChecked) {
  Scenario s = parse_scenario(std::string(kBase) +
                                  "data: {batch_size: 8}\ndistributed: {world_size: 4, sharding: zero1, "
                                  "reduce_dtype: bf16, found_inf_agreement: false}\n",
                              "t.yaml");
  EXPECT_TRUE(s.run.distributed.enabled);
  EXPECT_EQ(s.run.distributed.world_size, 4);
  EXPECT_EQ(s.run.distributed.backend, "gloo");
  EXPECT_EQ(s.run.distributed.reduce_dtype, at::kBFloat16);
  EXPECT_FALSE(s.run.distributed.found_inf_agreement);
  EXPECT_FALSE(parse_scenario(kBase, "t.yaml").run.distributed.enabled);
  // the global batch splits evenly over the ranks
  EXPECT_NE(error_of(std::string(kBase) + "data: {batch_size: 6}\ndistributed: {world_size: 4}\n")
                .find("t.yaml:6:27: distributed.world_size: data.batch_size (6, the global batch) must be divisible by "
                      "world_size (4)"),
            std::string::npos)
      << error_of(std::string(kBase) + "data: {batch_size: 6}\ndistributed: {world_size: 4}\n");
  EXPECT_NE(
      error_of(std::string(kBase) + "data: {batch_size: 8}\ndistributed: {world_size: 2, found_inf_agreement: false}\n")
          .find("distributed.found_inf_agreement: only zero1 shards the inf check"),
      std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "data: {batch_size: 8}\ndistributed: {world_size: 2, backend: mpi}\n")
                .find("distributed.backend: 'mpi' is not one of: gloo, nccl"),
            std::string::npos);
  EXPECT_NE(
      error_of(std::string(kBase) + "data: {batch_size: 8}\ndistributed: {world_size: 2, restore_scaler_ranks: [0]}\n")
          .find("restore_scaler_ranks: needs train.resume"),
      std::string::npos);
  // a rank-local injection: only in a data-parallel scenario, and on an existing rank
  const std::string inj = "inject:\n  - {kind: grad, steps: [1], rank: 2}\n";
  EXPECT_NE(error_of(std::string(kBase) + inj).find("inject[0].rank: only for a data-parallel scenario"),
            std::string::npos)
      << error_of(std::string(kBase) + inj);
  EXPECT_NE(error_of(std::string(kBase) + "data: {batch_size: 8}\ndistributed: {world_size: 2}\n" + inj)
                .find("inject[0].rank: expected 0 <= rank < distributed.world_size (2), got 2"),
            std::string::npos);
}

// The multi-GPU suite: every scenario is NCCL on CUDA with as many ranks as its name says GPUs, global batch 8 x 1024,
// and shares the single-GPU FP32 reference of the gpu suite's fp32-gpt2 workload — committed for cuda-sm90, so the
// run on a multi-GPU H200 machine needs no recording first.
TEST(ScenarioFiles, MultiGpuSuiteSharesTheCommittedSingleGpuFp32Reference) {
  const std::string dir = std::string(AMPCHECK_SOURCE_DIR) + "/scenarios";
  const auto fp32 = load_scenario(dir + "/sensitivity/gpt2/fp32.yaml");
  const auto key = ampcheck::reference::reference_key(fp32.run).key;
  EXPECT_TRUE(std::filesystem::exists(std::string(AMPCHECK_SOURCE_DIR) + "/references/cuda-sm90/" + key + ".h5"))
      << key;
  const auto files = load_suite(dir, "dist-multigpu");
  EXPECT_EQ(files.size(), 8u);
  for (const auto& f : files) {
    const auto sc = load_scenario(f);
    const auto& d = sc.run.distributed;
    EXPECT_EQ(d.backend, "nccl") << f;
    EXPECT_EQ(sc.device, "cuda") << f;
    EXPECT_NE(sc.run.name.find("-" + std::to_string(d.world_size) + "gpus"), std::string::npos) << f;
    EXPECT_EQ(sc.run.data.batch_size, 8) << f;
    EXPECT_EQ(sc.run.data.batch_size % d.world_size, 0) << f;
    EXPECT_EQ(ampcheck::reference::reference_key(sc.run).key, key) << f;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// issue 51: every dimension of every model kind, and every other number that sizes a run, is bounded at parse time:
// out of range (negative, past the bound, past int64) is a ScenarioError naming the file, the field and the range —
// never a crash in the model's construction (n_layer -3000000000), minutes of building (n_layer 1000000), a model
// whose head runs under another module's index (n_layer -1) or LibTorch's stack trace (negative n_embd / n_head).

namespace {
// the error of `model: {<fields>}` (strategy fp32), which must name the file and `field` and hold `range`
void expect_refused(const std::string& model, const std::string& field, const std::string& range,
                    const std::string& got) {
  const std::string e = error_of("name: t\nwhy: w\nstrategy: fp32\nmodel: {" + model + "}\n");
  EXPECT_NE(e.find("scenarios/t.yaml:4:"), std::string::npos) << model << ": " << e;
  EXPECT_NE(e.find(field + ": "), std::string::npos) << model << ": " << e;
  EXPECT_NE(e.find(range), std::string::npos) << model << ": " << e;
  EXPECT_NE(e.find(got), std::string::npos) << model << ": " << e;
}
}  // namespace

TEST(ScenarioParse, ModelDimensionsAreBoundedNamingTheFieldAndTheRange) {
  // the issue's four
  expect_refused("kind: mlp, n_layer: -3000000000", "model.n_layer", "1 to 256", "got -3000000000");
  expect_refused("kind: mlp, n_layer: 1000000", "model.n_layer", "1 to 256", "got 1000000");
  expect_refused("kind: mlp, n_layer: -1", "model.n_layer", "1 to 256", "got -1");
  expect_refused("kind: gpt, preset: micro, n_embd: -32", "model.n_embd", "1 to 16384", "got -32");
  expect_refused("kind: gpt, preset: micro, n_head: -2", "model.n_head", "1 to 1024", "got -2");
  // every dimension of every kind
  for (const char* kind : {"gpt", "mlp", "llama"}) {
    const std::string k = std::string("kind: ") + kind + ", ";
    expect_refused(k + "n_layer: 257", "model.n_layer", "1 to 256", "got 257");
    expect_refused(k + "n_embd: 16385", "model.n_embd", "1 to 16384", "got 16385");
    expect_refused(k + "vocab_size: 65537", "model.vocab_size", "2 to 65536", "got 65537");
    expect_refused(k + "vocab_size: 1", "model.vocab_size", "2 to 65536", "got 1");
    expect_refused(k + "block_size: -64", "model.block_size", "1 to 65536", "got -64");
    // past int64: refused with the range, never wrapped
    expect_refused(k + "n_layer: 99999999999999999999", "model.n_layer", "1 to 256", "got '99999999999999999999'");
  }
  expect_refused("kind: mlp, mlp_hidden: -512", "model.mlp_hidden", "1 to 65536", "got -512");
  expect_refused("kind: llama, mlp_hidden: 65537", "model.mlp_hidden", "1 to 65536", "got 65537");
  expect_refused("kind: llama, n_head: 2000", "model.n_head", "1 to 1024", "got 2000");
  expect_refused("kind: llama, n_kv_head: -1", "model.n_kv_head", "1 to 1024", "got -1");
  expect_refused("kind: llama, n_kv_head: 9223372036854775808", "model.n_kv_head", "1 to 1024",
                 "got '9223372036854775808'");
  expect_refused("kind: llama, outlier_channels: 65", "model.outlier_channels", "0 to the model's n_embd (64)",
                 "got 65");
  expect_refused("kind: gpt, head_loss: chunked, head_chunk_rows: -1", "model.head_chunk_rows", "0 to 16777216",
                 "got -1");
  // a head count that does not divide the width is named by the field that set it
  expect_refused("kind: gpt, preset: micro, n_head: 3", "model.n_head", "must be a multiple of n_head (3)",
                 "n_embd (32)");
  // the whole model: parameters (so nothing builds for minutes), whatever the dimensions
  const std::string big =
      error_of("name: t\nwhy: w\nstrategy: fp32\nmodel: {kind: gpt, n_layer: 256, n_embd: 16384}\n");
  EXPECT_NE(big.find("scenarios/t.yaml:4:"), std::string::npos) << big;
  EXPECT_NE(big.find("model: 824,693,522,432 parameters"), std::string::npos) << big;
  EXPECT_NE(big.find("more than the limit of 2,000,000,000"), std::string::npos) << big;
  // the largest presets and a model at the bounds' edge still parse
  for (const char* m : {"kind: gpt, preset: gpt2-350m", "kind: llama, preset: llama-150m", "kind: mlp, n_layer: 256",
                        "kind: gpt, preset: micro, n_embd: 64, n_head: 64, n_layer: 1, block_size: 8, vocab_size: 2"})
    EXPECT_NO_THROW(parse_scenario(std::string("name: t\nwhy: w\nstrategy: fp32\nmodel: {") + m + "}\n", "t.yaml"))
        << m << ": " << error_of(std::string("name: t\nwhy: w\nstrategy: fp32\nmodel: {") + m + "}\n");
}

TEST(ScenarioParse, OtherNumbersThatSizeARunAreBounded) {
  const std::string base = "name: t\nwhy: w\nmodel: {kind: gpt, preset: micro}\n";
  auto refused = [&](const std::string& section, const std::string& field, const std::string& range) {
    const std::string text = base + section + (section.rfind("strategy:", 0) == 0 ? "" : "strategy: fp32\n");
    const std::string e = error_of(text);
    EXPECT_NE(e.find("scenarios/t.yaml:"), std::string::npos) << section << ": " << e;
    EXPECT_NE(e.find(field + ": "), std::string::npos) << section << ": " << e;
    EXPECT_NE(e.find(range), std::string::npos) << section << ": " << e;
  };
  refused("data: {seq_len: -1}\n", "data.seq_len", "1 to the model's block_size (32)");
  refused("data: {vocab_size: -5}\n", "data.vocab_size", "2 to the model's vocab_size (128)");
  refused("data: {batch_size: 99999999999999999999}\n", "data.batch_size", "1 to 1048576");
  refused("data: {batch_size: 1048576}\n", "data", "tokens a micro-batch");
  refused("data: {corpus_tokens: 99999999999}\n", "data.corpus_tokens", "at most 268435456");
  refused("data: {corpus_tokens: 40}\n", "data.corpus_tokens", "too small for seq_len 32");
  refused("data: {branching: 100000}\n", "data.branching", "at most 65536");
  refused("schedule: {warmup_steps: -1}\n", "schedule.warmup_steps", "0 to 10000000");
  refused("train: {eval_every: -1}\n", "train.eval_every", "0 to 10000000");
  refused("train: {eval_batches: 1000000}\n", "train.eval_batches", "at most 1024");
  refused("strategy: {preset: fp8, fp8: {scaling: delayed, history: 1000000000000}}\n", "strategy.fp8.history",
          "at most 1024");
  refused("data: {batch_size: 8}\ndistributed: {world_size: 100000}\n", "distributed.world_size", "at most 1024");
  refused("data: {batch_size: 8}\ndistributed: {world_size: 2, timeout_s: 1.0e+300}\n", "distributed.timeout_s",
          "(0, 86400]");
  refused("data: {batch_size: 8}\ndistributed: {world_size: 2, bucket_mb: 1.0e+300}\n", "distributed.bucket_mb",
          "(0, 65536]");
  refused("tolerance: {window: 99999999999}\n", "tolerance.window", "at most 10000000");
}

// The parameter count the parser bounds (models::parameter_count, from the dimensions alone) is the built model's, for
// every kind and a few shapes; the mlp's names are listed without building it, as the gpt's and llama's.
TEST(ScenarioModel, ParameterCountAndNamesAreTheBuiltModelsWithoutBuildingIt) {
  using ampcheck::models::ModelConfig;
  auto config = [](const std::string& kind, const std::string& preset) {
    ModelConfig m;
    m.kind = kind;
    m.preset = preset;
    return m;
  };
  std::vector<ModelConfig> configs = {config("gpt", "micro"), config("gpt", "nano"), config("mlp", "tiny"),
                                      config("mlp", "small"), config("llama", "llama-micro")};
  ModelConfig odd = config("gpt", "micro");
  odd.n_layer = 3, odd.n_embd = 24, odd.n_head = 3, odd.block_size = 7, odd.vocab_size = 50;
  configs.push_back(odd);
  ModelConfig deep = config("mlp", "tiny");
  deep.n_layer = 4, deep.n_embd = 8, deep.mlp_hidden = 12, deep.vocab_size = 30;
  configs.push_back(deep);
  ModelConfig gqa = config("llama", "llama-micro");
  gqa.n_layer = 1, gqa.n_head = 4, gqa.n_kv_head = 1, gqa.n_embd = 32, gqa.mlp_hidden = 40, gqa.tie_embeddings = 1;
  configs.push_back(gqa);
  for (const ModelConfig& c : configs) {
    const ModelConfig r = ampcheck::models::resolve_preset(c);
    const auto model = ampcheck::models::make_model(r);
    EXPECT_EQ(ampcheck::models::parameter_count(r), static_cast<double>(model->parameter_count()))
        << c.kind << " " << c.preset << " L=" << r.n_layer;
    if (r.kind != "mlp") continue;
    std::vector<std::string> built;
    for (const auto& p : model->parameters()) built.push_back(p.name);
    EXPECT_EQ(ampcheck::models::Mlp::parameter_names(r), built) << c.preset;
  }
  // a config no model can be built from is refused by resolve_preset too (the backstop for callers but the parser)
  ModelConfig bad = config("mlp", "tiny");
  bad.n_layer = -1;
  EXPECT_THROW(ampcheck::models::resolve_preset(bad), std::invalid_argument);
  bad = config("gpt", "micro");
  bad.n_head = -1;
  EXPECT_THROW(ampcheck::models::resolve_preset(bad), std::invalid_argument);
}
