// External runs (docs/TRAJECTORY_FORMAT.md): what a training loop other than ampcheck's may write — HDF5 with only
// `loss` required, or JSON lines — and the errors for files that do not follow the format, each naming the file,
// the line or column and what was expected. HDF5 files without ampcheck's other columns are made with h5py (the
// Python the build links), as a user's recorder would.
#include "reference/external_run.h"
#include "trajectory/run_attributes.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <tuple>

using namespace ampcheck;

namespace {
void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
// Runs python code with h5py; the code sees the file path as P.
void h5py_write(const std::string& path, const std::string& code) {
  const std::string py = path + ".py";
  write_text(py, "import h5py, numpy as np\nP = '" + path + "'\n" + code + "\n");
  ASSERT_EQ(std::system((std::string(AMPCHECK_PYTHON) + " " + py).c_str()), 0) << code;
}
std::string error_of(const std::string& path) {
  try {
    reference::read_external_run(path);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}
const char* kHeader =
    "f = h5py.File(P, 'w'); f.attrs['format'] = 'ampcheck-trajectory'; f.attrs['format_version'] = '1'\n";
}  // namespace

TEST(ExternalRun, HdfWithOnlyTheLossReadsTheOtherColumnsAsNaN) {
  const std::string p = ampcheck::testing::temp_path("only_loss") + ".h5";
  h5py_write(p, std::string(kHeader) +
                    "f['steps/loss'] = np.array([3.0, 2.5, 2.0])\nf['steps/grad_norm'] = np.array([1.0, 0.9, 0.8])");
  const auto f = reference::read_external_run(p);
  ASSERT_EQ(f.trajectory.size(), 3);
  EXPECT_EQ(f.trajectory.rows[2][trajectory::kLoss], 2.0);
  EXPECT_EQ(f.trajectory.rows[1][trajectory::kGradNorm], 0.9);
  EXPECT_TRUE(std::isnan(f.trajectory.rows[0][trajectory::kUpdateNorm]));
  EXPECT_EQ(f.columns_present, (std::vector<std::string>{"loss", "grad_norm"}));
}

TEST(ExternalRun, HdfErrorsNameTheFileTheColumnAndWhatWasExpected) {
  const std::string no_loss = ampcheck::testing::temp_path("no_loss") + ".h5";
  h5py_write(no_loss, std::string(kHeader) + "f['steps/grad_norm'] = np.array([1.0])");
  EXPECT_NE(error_of(no_loss).find(no_loss + ": column /steps/loss is missing"), std::string::npos)
      << error_of(no_loss);
  const std::string short_col = ampcheck::testing::temp_path("short_col") + ".h5";
  h5py_write(short_col,
             std::string(kHeader) + "f['steps/loss'] = np.array([3.0, 2.0])\nf['steps/lr'] = np.array([1e-3])");
  EXPECT_NE(error_of(short_col).find("column /steps/lr has 1 values, expected one per step like /steps/loss (2)"),
            std::string::npos)
      << error_of(short_col);
  const std::string foreign = ampcheck::testing::temp_path("foreign") + ".h5";
  h5py_write(foreign, "f = h5py.File(P, 'w'); f['steps/loss'] = np.array([1.0])");
  EXPECT_NE(error_of(foreign).find("not an ampcheck trajectory file (attribute 'format')"), std::string::npos);
  // a truncated file (a crash mid-write without the recorder's atomic rename) is no HDF5 file
  const std::string truncated = ampcheck::testing::temp_path("truncated") + ".h5";
  h5py_write(truncated, std::string(kHeader) +
                            "f['steps/loss'] = np.arange(1000.0)\nf.close()\n"
                            "d = open(P, 'rb').read(); open(P, 'wb').write(d[: len(d) // 2])");
  EXPECT_NE(error_of(truncated).find(truncated + ": cannot open as HDF5"), std::string::npos) << error_of(truncated);
}

TEST(ExternalRun, JsonLinesWithAHeaderNullsAndSparseColumns) {
  const std::string p = ampcheck::testing::temp_path("run") + ".jsonl";
  write_text(p,
             "{\"format\": \"ampcheck-trajectory\", \"format_version\": 1, \"attributes\": {\"strategy\": "
             "\"fp16-autocast\"}}\n"
             "{\"step\": 0, \"loss\": 3.0, \"loss_scale\": 65536, \"skipped\": 0}\n"
             "{\"step\": 1, \"loss\": 2.9, \"loss_scale\": 32768, \"skipped\": 1, \"frac_zero_grad\": 0.01}\n"
             "\n"
             "{\"step\": 2, \"loss\": null}\n");
  const auto f = reference::read_external_run(p);
  ASSERT_EQ(f.trajectory.size(), 3);
  EXPECT_EQ(f.attributes.strategy.value_or(""), "fp16-autocast");
  EXPECT_EQ(f.trajectory.skipped_steps(), 1);
  EXPECT_TRUE(std::isnan(f.trajectory.rows[2][trajectory::kLoss]));
  EXPECT_TRUE(std::isnan(f.trajectory.rows[0][trajectory::kFracZero]));
  EXPECT_EQ(f.trajectory.rows[1][trajectory::kFracZero], 0.01);
  EXPECT_EQ(f.columns_present, (std::vector<std::string>{"loss", "loss_scale", "skipped", "frac_zero_grad"}));
}

TEST(ExternalRun, JsonLinesErrorsNameTheFileTheLineAndWhatWasExpected) {
  struct Case {
    std::string text, want;
  };
  const std::vector<Case> cases = {
      {"{\"loss\": 3.0}\n{\"grad_norm\": 1.0}\n", ":2: 'loss' is required on every step"},
      {"{\"loss\": 3.0, \"gradnorm\": 1.0}\n", ":1: unknown column 'gradnorm' (known: step, loss, grad_norm"},
      {"{\"loss\": \"low\"}\n", ":1: 'loss' must be a number or null, got \"low\""},
      {"{\"step\": 0, \"loss\": 3.0}\n{\"step\": 2, \"loss\": 2.0}\n", ":2: 'step' is 2, expected 1"},
      {"{\"loss\": 3.0\n", ":1: not JSON"},
      {"{\"format\": \"ampcheck-trajectory\", \"format_version\": 2}\n{\"loss\": 1}\n",
       ":1: 'format_version' is 2, expected 1"},
      {"{\"loss\": 3.0}\n{\"format\": \"ampcheck-trajectory\", \"format_version\": 1}\n",
       ":2: a header object is only allowed on the first line"},
      {"\n", ": no steps"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string p = ampcheck::testing::temp_path("bad" + std::to_string(i)) + ".jsonl";
    write_text(p, cases[i].text);
    const std::string e = error_of(p);
    EXPECT_NE(e.find(p + cases[i].want), std::string::npos) << "case " << i << ": got " << e;
  }
}

TEST(ExternalRun, AmpcheckFilesStillNeedEveryColumn) {
  const std::string p = ampcheck::testing::temp_path("ampcheck_only_loss") + ".h5";
  h5py_write(p, std::string(kHeader) + "f['steps/loss'] = np.array([3.0])");
  EXPECT_THROW(trajectory::read_trajectory(p), std::runtime_error);  // ampcheck's own files: all columns
  EXPECT_NO_THROW(reference::read_external_run(p));
}

// The attributes as one typed record: a string map read into it and written back is the same map, key for key and
// value for value (unknown keys and a typed field's empty value kept as text); a value that is not what its key holds
// is refused naming the file, the attribute and what was expected.
TEST(ExternalRun, AttributesReadIntoTheRecordAndBackAreTheSame) {
  const std::map<std::string, std::string> in = {
      {"status", "nonfinite"},     {"first_nonfinite_step", "12"}, {"error", ""},         {"stack_torch", "2.11.0"},
      {"steps_without_grads", ""}, {"a_users_key", "kept"},        {"strategy", "fp16-x"}};
  const auto a = trajectory::parse_run_attributes(in, "run.h5");
  EXPECT_EQ(a.status, trajectory::RunStatus::NonFinite);
  EXPECT_EQ(a.first_nonfinite_step, 12);
  EXPECT_EQ(a.error, std::string());
  EXPECT_FALSE(a.steps_without_grads) << "an empty typed value reads as absent";
  EXPECT_EQ(a.stack.at("torch"), "2.11.0");
  EXPECT_EQ(a.other.at("a_users_key"), "kept");
  EXPECT_EQ(trajectory::attribute_map(a), in);
  EXPECT_EQ(trajectory::attribute_text(a, "first_nonfinite_step"), "12");
  for (const auto& [key, value, expected] :
       {std::tuple<std::string, std::string, std::string>{"status", "done",
                                                          "expected completed, nonfinite, error, "
                                                          "running or interrupted"},
        {"golden_steps", "12x", "expected an integer"},
        {"float8_linears", "007", "expected an integer"}}) {
    try {
      trajectory::parse_run_attributes({{key, value}}, "run.h5");
      ADD_FAILURE() << key << "=" << value << " was accepted";
    } catch (const trajectory::AttributeError& e) {
      EXPECT_NE(std::string(e.what()).find("run.h5: attribute '" + key + "' is '" + value + "', " + expected),
                std::string::npos)
          << e.what();
    }
  }
}
