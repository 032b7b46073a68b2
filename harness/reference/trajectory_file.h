// Trajectory files (HDF5, readable with h5py): root attributes for provenance (format version, ampcheck version,
// LibTorch / CUDA / cuDNN versions, device name and class, scenario text and name, status, date) and one float64
// dataset per trajectory column under /steps/, plus /events (strings). Written atomically (temporary + rename),
// never over an existing file unless overwrite is set.
#pragma once

#include "engine/trajectory.h"

#include <map>
#include <string>
#include <vector>

namespace ampcheck::reference {

constexpr int kTrajectoryFormatVersion = 1;

struct TrajectoryFile {
  std::map<std::string, std::string> attributes;  // provenance and outcome, all strings
  engine::Trajectory trajectory;
  // Further per-step series (e.g. a reference's loss spread), as float64 datasets under /series/<name>.
  std::map<std::string, std::vector<double>> series;
  // A reference's noise runs: each one's columns under /noise/<label>/<column> (same columns as /steps/).
  std::vector<engine::LabelledTrajectory> noise_runs;
};

void write_trajectory(const std::string& path, const TrajectoryFile& file, bool overwrite);
TrajectoryFile read_trajectory(const std::string& path);

}  // namespace ampcheck::reference
