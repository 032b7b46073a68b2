// The trajectory file's root attributes as one typed record, described once. On disk they stay HDF5 string attributes
// (and a JSON-lines header's "attributes" object), key for key and value for value as before; in code they are
// `RunAttributes`: each key a field typed as its values are (text, an integer, a RunStatus). `visit_attributes` below
// is the one list of the keys — each with what it holds and who writes it — from which reading (string map -> record,
// `parse_run_attributes`), writing (record -> string map, `attribute_map`) and lookup by name (`attribute_text`)
// derive. A field is std::optional: absent in the file, absent in the record (a text key written empty stays empty; a
// typed field's empty value reads as absent, as every reader treated it, and is kept as text in `other`; an integer
// is read only as std::to_string writes it, so a file read and written back is the same). Keys the record does not know
// (another version's, a user's attributes=... through the Python recorder) are kept as they are, in `other`; the
// `events` attribute is the trajectory's (trajectory_file.cpp moves it into Trajectory::events), not the record's.
#pragma once

#include "trajectory/run_status.h"

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

namespace ampcheck::trajectory {

struct RunAttributes {
  using Text = std::optional<std::string>;
  using Integer = std::optional<int64_t>;
  // the file format's (write_trajectory writes them whatever the record holds; the reader checks them)
  Text format, format_version;
  // provenance (run::provenance, for every file ampcheck writes from a scenario)
  Text ampcheck_version, libtorch_version, cuda_version, cudnn_version, device_name, device_class;
  Text scenario_name, scenario_path, scenario_text, scenario_hash, strategy, date;
  std::map<std::string, std::string> stack;  // stack_<key>: engine::stack_fingerprint, <key> -> value
  // how the run ended
  std::optional<RunStatus> status;
  Text error, engine, note;
  Integer first_nonfinite_step, failed_step;
  Text first_nonfinite_module, first_nonfinite_pass, first_nonfinite_op;
  Text rank_result;
  // references
  Text kind, reference_key, reference_canonical, noise_runs, noise_sources, reference_of, git_commit, perturbation;
  // judgements
  Text verdict, verdict_message, reference, expect, validation;
  // goldens (ampcheck validate)
  Text golden_class, golden_config, golden_config_hash, golden_checksum;
  Integer golden_steps;
  // the Python recorder's
  Text recorder, torch_version, device, model, model_parameters, dataset, run_key, optimizer, scaler, grad_scaler;
  Text grad_probe, param_dtype, autocast_dtype, modules, peak_memory_bytes;
  Integer steps_without_grads, float8_linears;
  // a sweep's plan (python/src/ampcheck/plan.py) and the measurements a training script adds
  Text plan_run, plan_strategy, plan_applied, workload, timing_method, tokens_per_step, samples_per_step;
  // keys the record does not know, as read
  std::map<std::string, std::string> other;
};

// The keys, each once. v(key, field) for a field; v.prefixed(prefix, map) for a family of keys.
template <class R, class V>
void visit_attributes(R& a, V& v) {
  // -- the file format (trajectory_file.cpp) --------------------------------------------------------------------------
  v("format", a.format);                  // "ampcheck-trajectory"; written and checked by the file's reader/writer
  v("format_version", a.format_version);  // kTrajectoryFormatVersion as text; another one is refused with a HINT
  // -- provenance: run::provenance (run, check, record, validate's goldens, the ranks' files) ------------------------
  v("ampcheck_version", a.ampcheck_version);  // AMPCHECK_VERSION of the binary that wrote the file
  v("libtorch_version", a.libtorch_version);  // the LibTorch it ran on
  v("cuda_version", a.cuda_version);          // the CUDA runtime ("" on a CPU build); the recorder's too
  v("cudnn_version", a.cudnn_version);        // cuDNN's version, or ""
  v("device_name", a.device_name);            // the device's name; the recorder's too
  v("device_class", a.device_class);          // the device class references are kept per (cpu, cuda-sm90, ...)
  v("scenario_name", a.scenario_name);        // the scenario's run.name (validate checks a golden's against it)
  v("scenario_path", a.scenario_path);        // the scenario file it was read from
  v("scenario_text", a.scenario_text);        // the scenario's YAML text, whole (validate --seal re-parses it)
  v("scenario_hash", a.scenario_hash);        // std::hash of scenario_text, as decimal text
  v("strategy", a.strategy);      // "<name>: <description>" from provenance; the recorder's: the user's strategy name
  v("date", a.date);              // ISO 8601 UTC, when the file was made
  v.prefixed("stack_", a.stack);  // engine::stack_fingerprint (validate compares a golden's with this stack's)
  // -- how the run ended: run_directory's result_file, the launcher's rank files, judge, the recorder
  // ------------------
  v("status", a.status);  // RunStatus's word: completed | nonfinite | error | running | interrupted
  v("error", a.error);    // the error's message ("" when none; run_directory writes it always)
  v("engine", a.engine);  // the engine plan as applied: "stock", or the options and refusals
  v("note", a.note);      // the recorder's: why it stopped (interrupted: "SIGTERM", ...)
  v("first_nonfinite_step", a.first_nonfinite_step);      // the first step that went non-finite (engine, recorder)
  v("first_nonfinite_module", a.first_nonfinite_module);  // ... the module it first appeared in
  v("first_nonfinite_pass", a.first_nonfinite_pass);      // ... forward or backward
  v("first_nonfinite_op", a.first_nonfinite_op);          // ... the operation (the recorder's operation trace)
  v("failed_step", a.failed_step);                        // the recorder's: the step an error run failed at
  v("rank_result", a.rank_result);  // a data-parallel rank's RankResult as JSON (distributed/launcher.cpp)
  // -- references: record (fp32-reference), reference (external-fp32-reference) ---------------------------------------
  v("kind", a.kind);                                // fp32-reference | external-fp32-reference
  v("reference_key", a.reference_key);              // the reference's key (record); compared between run and reference
  v("reference_canonical", a.reference_canonical);  // the canonical text the key hashes (ReferenceStore checks it)
  v("noise_runs", a.noise_runs);                    // the noise runs' labels, as record/reference join them
  v("noise_sources", a.noise_sources);              // reference: the files the noise runs came from
  v("reference_of", a.reference_of);                // reference: the FP32 run it was made from
  v("git_commit", a.git_commit);                    // record: $AMPCHECK_GIT_COMMIT where set
  v("perturbation", a.perturbation);  // the recorder's: none | ulp | seed | order (a noise run's kind); exact text
  // -- judgements: check's and judge's result files, validate's runs
  // ---------------------------------------------------
  v("verdict", a.verdict);                  // the verdict's word
  v("verdict_message", a.verdict_message);  // the verdict's message
  v("reference", a.reference);              // the reference file judged against
  v("expect", a.expect);                    // the recorder's: the verdict judge expects (default tracks); exact text
  v("validation", a.validation);            // validate: "<verdict>: <result>" of the run against its golden
  // -- goldens: ampcheck validate's record and --seal (validate/golden.cpp) -------------------------------------------
  v("golden_class", a.golden_class);              // the golden's class (the stack it was recorded on)
  v("golden_config", a.golden_config);            // the engine configuration's canonical text
  v("golden_config_hash", a.golden_config_hash);  // its hash
  v("golden_steps", a.golden_steps);              // the golden's step count
  v("golden_checksum", a.golden_checksum);        // "fnv1a64:<hex>" over everything else (content_checksum)
  // -- the Python recorder (python/src/ampcheck/recorder.py, guard.py; docs/TRAJECTORY_FORMAT.md)
  // ----------------------
  v("recorder", a.recorder);                  // "ampcheck_recorder 1"
  v("torch_version", a.torch_version);        // torch.__version__ without the local part
  v("device", a.device);                      // the model's device
  v("model", a.model);                        // the model's class; compared between run and reference
  v("model_parameters", a.model_parameters);  // its parameter count as text; compared between run and reference
  v("dataset", a.dataset);                    // the caller's; compared between run and reference
  v("run_key", a.run_key);                    // the caller's name for the training setup; compared likewise
  v("optimizer", a.optimizer);                // the optimizer's class
  v("scaler", a.scaler);                      // the GradScaler's settings
  v("grad_scaler", a.grad_scaler);            // enabled | disabled | none
  v("grad_probe", a.grad_probe);              // where the grads were read (backward-hooks, after_backward, at_step)
  v("steps_without_grads", a.steps_without_grads);  // probe steps whose grads could not be read
  v("param_dtype", a.param_dtype);                  // the parameters' dtypes, sorted, joined by ","
  v("autocast_dtype", a.autocast_dtype);            // float16 | bfloat16 | none | unknown
  v("float8_linears", a.float8_linears);            // modules that are FP8 training layers (Float8Linear)
  v("modules", a.modules);                          // the model's module table (sweep --localize reads it)
  v("peak_memory_bytes", a.peak_memory_bytes);      // CUDA's peak allocation; a number as text, read leniently (NaN)
  // -- a sweep's plan (python/src/ampcheck/plan.py) and the script's own measurements ---------------------------------
  v("plan_run", a.plan_run);                  // the plan's run the recording was made for
  v("plan_strategy", a.plan_strategy);        // the plan's strategy
  v("plan_applied", a.plan_applied);          // "yes" (absent: yes), or "refused: <why>"
  v("workload", a.workload);                  // the workload's description (else run_key)
  v("timing_method", a.timing_method);        // how step_time_ms was measured (absent: the recorder's wall clock)
  v("tokens_per_step", a.tokens_per_step);    // a number as text, read leniently (NaN unless a positive number)
  v("samples_per_step", a.samples_per_step);  // likewise
}

// A value that is not what its key holds: what it says names the file, the attribute and what was expected.
struct AttributeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The string map as read from a file (`where`: the file, for messages) into the record; throws AttributeError.
RunAttributes parse_run_attributes(const std::map<std::string, std::string>& attributes, const std::string& where);
// The record as the file stores it: each field present as its text, the `other` keys as they are.
std::map<std::string, std::string> attribute_map(const RunAttributes& a);
// One attribute's text by its key ("" when absent), for code that takes a key as data (messages, a table of keys).
std::string attribute_text(const RunAttributes& a, const std::string& key);

// A text field's value, or `otherwise` where it is absent or empty (how every reader treats an empty attribute).
inline std::string text_or(const RunAttributes::Text& v, const std::string& otherwise = "") {
  return v && !v->empty() ? *v : otherwise;
}

}  // namespace ampcheck::trajectory
