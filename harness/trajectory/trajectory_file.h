// Trajectory files (HDF5, readable with h5py): root attributes for provenance (format version, ampcheck version,
// LibTorch / CUDA / cuDNN versions, device name and class, scenario text and name, status, date) and one float64
// dataset per trajectory column under /steps/, plus /events (strings), and where the run kept them the per-step
// tensor digests under /digests (uint64, steps x tensors; `ampcheck validate`). Written atomically (temporary +
// rename), never over an existing file unless overwrite is set.
#pragma once

#include "trajectory/run_attributes.h"
#include "trajectory/trajectory.h"

#include <map>
#include <string>
#include <vector>

namespace ampcheck::trajectory {

constexpr int kTrajectoryFormatVersion = 1;

struct TrajectoryFile {
  RunAttributes attributes;  // provenance and outcome: the root attributes, typed (run_attributes.h)
  Trajectory trajectory;
  // Further per-step series (e.g. a reference's loss spread), as float64 datasets under /series/<name>.
  std::map<std::string, std::vector<double>> series;
  // A reference's noise runs: each one's columns under /noise/<label>/<column> (same columns as /steps/).
  std::vector<LabelledTrajectory> noise_runs;
  std::vector<std::string> columns_present;  // as read: the /steps/ columns the file holds
};

// Which /steps/ columns a reader insists on: every one (files ampcheck writes), or only `loss` (runs written by
// other training loops, docs/TRAJECTORY_FORMAT.md): a missing column then reads as NaN at every step.
enum class Columns { AllRequired, LossRequired };

void write_trajectory(const std::string& path, const TrajectoryFile& file, bool overwrite);
// Throws naming the file and, for a bad column, the column and what was expected (present, as long as `loss`); for
// an attribute whose value is not what its key holds, the attribute and what was expected (parse_run_attributes).
// Text read from the file is untrusted: see make_attributes_printable.
TrajectoryFile read_trajectory(const std::string& path, Columns required = Columns::AllRequired);

// read_trajectory for a file from outside (another training loop, a CI job's leftovers): HDF5's own library is not
// hardened against malformed files (Debian 12's 1.10 crashes on some corrupted variable-length attributes), so the
// file is read in a forked child, which re-writes what it read with this writer (fixed-length strings only) into a
// private temporary file that the caller then reads. A child that dies (a signal) or runs past `timeout_s` is an
// error naming the file — never a crash of the command ($AMPCHECK_READ_TIMEOUT_S overrides the timeout). Same result
// and errors as read_trajectory otherwise.
TrajectoryFile read_trajectory_contained(const std::string& path, Columns required = Columns::AllRequired,
                                         int timeout_s = 60);

// Attribute text from a file (HDF5 attributes, a JSON-lines header's "attributes") on its way into reports and the
// terminal: every key and value made printable (io/text.h — a byte that is not UTF-8 or a control character other
// than newline and tab becomes \xNN), except the attributes that select what ampcheck does with the file and so must
// be exact (kExactAttributes): one of those that is not printable UTF-8 is refused, naming the file, the attribute
// and the offending byte. `where` is the file (and line or group) for the message.
inline const char* const kExactAttributes[] = {"format", "format_version", "status",
                                               "expect", "strategy",       "perturbation"};
void make_attributes_printable(std::map<std::string, std::string>& attributes, const std::string& where);

}  // namespace ampcheck::trajectory
