// External runs — trajectories written by a training loop other than ampcheck's engine (a user's PyTorch-Python
// loop through a recorder, or any writer) in the format docs/TRAJECTORY_FORMAT.md describes:
//   *.h5 / *.hdf5  ampcheck's own HDF5 layout (root attributes format = "ampcheck-trajectory", format_version = 1,
//                  one float64 dataset per column under /steps/), with `loss` the only required column;
//   *.jsonl        JSON lines: an optional header object {"format": "ampcheck-trajectory", "format_version": 1,
//                  "attributes": {...}}, then one object per step {"step": s, "loss": ..., "grad_norm": ...}.
// A column a file lacks reads as NaN at every step (the verdict then says the signal was not judged); null in
// JSON is NaN. Anything else that does not follow the format is an error naming the file, the line or column and
// what was expected.
#pragma once

#include "trajectory/trajectory_file.h"

#include <string>

namespace ampcheck::reference {

constexpr const char* kTrajectoryFormatName = "ampcheck-trajectory";

trajectory::TrajectoryFile read_jsonl_trajectory(const std::string& path);
// By the file's extension: .jsonl → read_jsonl_trajectory, anything else → HDF5 with only `loss` required.
trajectory::TrajectoryFile read_external_run(const std::string& path, bool contained = true);

// The provenance attributes that must agree between a run and its reference (and between a reference's runs):
// run_key (the user's name for the training setup), model, model_parameters, dataset, reference_key. Only
// attributes both files carry are compared. Throws, naming both files, the attribute and both values.
void check_same_training(const trajectory::TrajectoryFile& run, const std::string& run_path,
                         const trajectory::TrajectoryFile& ref, const std::string& ref_path);

// A seed or order noise run whose every recorded value equals the FP32 run's, bit for bit, measured no noise: the
// perturbation never reached the training (a script that seeds itself after the recorder's seed was applied, a data
// order fixed elsewhere). A reference whose band would rest on such a run (`noise` = its noise runs, `base` the FP32
// run) is refused: throws naming the file, the run and how the seed must reach the script. ulp and skip runs are not
// checked (a skip run equals the FP32 run at its first step by construction).
void check_noise_runs_are_noise(const std::vector<trajectory::LabelledTrajectory>& noise,
                                const trajectory::Trajectory& base, const std::string& path);
inline void check_noise_runs_are_noise(const trajectory::TrajectoryFile& ref, const std::string& path) {
  check_noise_runs_are_noise(ref.noise_runs, ref.trajectory, path);
}

}  // namespace ampcheck::reference
