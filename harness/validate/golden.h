// The seal of a golden trajectory: what makes a golden trustworthy input for `ampcheck validate`. A golden is written
// with three attributes beside its content —
//   golden_checksum     "fnv1a64:<16 hex>" over everything the comparison reads (every /steps column, the /digests
//                       tensor names and matrices, the /series datasets) and every root attribute but the checksum
//                       itself and the writer's own three (format, format_version, events);
//   golden_config_hash  16 hex digits of golden_config, the canonical text of the scenario's run as it trained
//                       (the reference key's text — model, data, optimizer, schedule, loop, seed — plus the strategy
//                       and the engine options that change bits);
//   golden_steps        the number of steps it holds.
// A golden that fails its checksum, belongs to another scenario or configuration, or holds another number of steps
// than the run is bad input (BadGolden: exit 2, the file named, "re-record the golden on a known-good machine") —
// never a fault of the machine. A golden without a checksum (recorded before the seal existed) is refused the same way,
// with the two ways out: re-record it, or seal a golden you trust with `ampcheck validate --seal FILE`.
#pragma once

#include "engine/run_config.h"
#include "trajectory/trajectory_file.h"

#include <stdexcept>
#include <string>

namespace ampcheck::validate {

// Bad input in a golden file: the message names the file, what is wrong and the HINT.
struct BadGolden : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The canonical text of a run's configuration as a golden keys it, and its FNV-1a hash (16 hex digits).
std::string golden_config_text(const engine::RunConfig& run);
std::string golden_config_hash(const engine::RunConfig& run);
// The content checksum of a trajectory file as read (or as about to be written: the writer adds only `format`,
// `format_version` and `events`, which the checksum leaves out).
std::string content_checksum(const trajectory::TrajectoryFile& file);
// Adds golden_config, golden_config_hash, golden_steps (from `run` and the trajectory) and then golden_checksum.
void seal_golden(trajectory::TrajectoryFile& file, const engine::RunConfig& run);
// Throws BadGolden unless `file` (read from `path`) carries a checksum that matches its content, was recorded for the
// scenario `run.name`, holds run.loop.steps steps and has run's configuration hash.
void verify_golden(const trajectory::TrajectoryFile& file, const std::string& path, const engine::RunConfig& run);
// Reads a golden (in a contained child: a corrupt file cannot crash the command) and verifies it; a file that cannot
// be read is a BadGolden too.
trajectory::TrajectoryFile read_golden(const std::string& path, const engine::RunConfig& run);
// The HINT every BadGolden ends with.
std::string re_record_hint();

}  // namespace ampcheck::validate
