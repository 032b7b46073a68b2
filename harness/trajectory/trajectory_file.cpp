// HDF5 C API writer/reader for trajectories.
#include "trajectory/trajectory_file.h"

#include "io/files.h"
#include "io/text.h"

#include <hdf5.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace ampcheck::trajectory {

namespace {
void check(herr_t rc, const std::string& what) {
  if (rc < 0) throw std::runtime_error("HDF5: " + what + " failed");
}
hid_t checked(hid_t id, const std::string& what) {
  if (id < 0) throw std::runtime_error("HDF5: " + what + " failed");
  return id;
}

void write_string_attr(hid_t obj, const std::string& name, const std::string& value) {
  hid_t type = checked(H5Tcopy(H5T_C_S1), "H5Tcopy");
  check(H5Tset_size(type, std::max<size_t>(1, value.size())), "H5Tset_size");
  check(H5Tset_cset(type, H5T_CSET_UTF8), "H5Tset_cset");
  hid_t space = checked(H5Screate(H5S_SCALAR), "H5Screate");
  hid_t attr = checked(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), "attribute " + name);
  check(H5Awrite(attr, type, value.empty() ? "" : value.c_str()), "write attribute " + name);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

void write_column(hid_t group, const std::string& name, const std::vector<double>& values) {
  hsize_t n = values.size();
  hid_t space = checked(H5Screate_simple(1, &n, nullptr), "dataspace");
  hid_t ds = checked(H5Dcreate2(group, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "dataset " + name);
  if (n > 0) check(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), "write " + name);
  H5Dclose(ds);
  H5Sclose(space);
}

// Resource limits on a file from outside: steps (as a JSON-lines file's) and elements of one dataset (2 GiB of
// float64).
constexpr hsize_t kMaxSteps = 10'000'000;
constexpr hsize_t kMaxElements = hsize_t{1} << 28;

std::vector<double> read_column(hid_t file, const std::string& name, const std::string& path) {
  hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  if (ds < 0) throw std::runtime_error(path + ": missing dataset /" + name);
  hid_t space = H5Dget_space(ds);
  hsize_t n = 0;
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank == 1) H5Sget_simple_extent_dims(space, &n, nullptr);  // (a rank above 1 would write past n)
  if (rank != 1 || n > kMaxSteps) {
    H5Sclose(space);
    H5Dclose(ds);
    throw std::runtime_error(
        path + ": dataset /" + name +
        (rank != 1 ? " must be one-dimensional (one value per step)" : " has more than 10,000,000 steps"));
  }
  std::vector<double> out(n);
  const herr_t rc = n > 0 ? H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) : 0;
  H5Sclose(space);
  H5Dclose(ds);
  if (rc < 0) throw std::runtime_error(path + ": dataset /" + name + " cannot be read as float64");
  return out;
}

// A (steps x casts) matrix of the FP8 probes as one 2-D float64 dataset.
void write_matrix(hid_t group, const std::string& name, const std::vector<std::vector<double>>& rows, size_t cols) {
  hsize_t dims[2] = {rows.size(), cols};
  std::vector<double> flat;
  flat.reserve(rows.size() * cols);
  for (const auto& r : rows) {
    if (r.size() != cols) throw std::runtime_error("HDF5: fp8/" + name + ": ragged rows");
    flat.insert(flat.end(), r.begin(), r.end());
  }
  hid_t space = checked(H5Screate_simple(2, dims, nullptr), "dataspace");
  hid_t ds = checked(H5Dcreate2(group, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "dataset fp8/" + name);
  if (!flat.empty())
    check(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat.data()), "write fp8/" + name);
  H5Dclose(ds);
  H5Sclose(space);
}

std::vector<std::vector<double>> read_matrix(hid_t file, const std::string& name, size_t cols,
                                             const std::string& path) {
  hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  if (ds < 0) throw std::runtime_error(path + ": missing dataset /" + name);
  hid_t space = H5Dget_space(ds);
  hsize_t dims[2] = {0, 0};
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank == 2) H5Sget_simple_extent_dims(space, dims, nullptr);
  if (rank != 2 || dims[1] != cols) {
    H5Sclose(space);
    H5Dclose(ds);
    throw std::runtime_error(path + ": dataset /" + name + " must be (steps x " + std::to_string(cols) +
                             ") float64, one column per name in /fp8 attribute 'casts'");
  }
  if (dims[0] > kMaxSteps || (dims[1] > 0 && dims[0] > kMaxElements / dims[1])) {
    H5Sclose(space);
    H5Dclose(ds);
    throw std::runtime_error(path + ": dataset /" + name + " is larger than a trajectory can be (" +
                             std::to_string(dims[0]) + " x " + std::to_string(dims[1]) + ")");
  }
  std::vector<double> flat(dims[0] * dims[1]);
  const herr_t rc = flat.empty() ? 0 : H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat.data());
  H5Sclose(space);
  H5Dclose(ds);
  if (rc < 0) throw std::runtime_error(path + ": dataset /" + name + " cannot be read as float64");
  std::vector<std::vector<double>> rows(dims[0]);
  for (hsize_t i = 0; i < dims[0]; ++i) rows[i].assign(flat.begin() + i * cols, flat.begin() + (i + 1) * cols);
  return rows;
}

// A (steps x tensors) matrix of 64-bit digests (StepDigests) as one 2-D uint64 dataset.
void write_digests(hid_t group, const std::string& name, const std::vector<std::vector<uint64_t>>& rows, size_t cols) {
  hsize_t dims[2] = {rows.size(), cols};
  std::vector<uint64_t> flat;
  flat.reserve(rows.size() * cols);
  for (const auto& r : rows) {
    if (r.size() != cols) throw std::runtime_error("HDF5: digests/" + name + ": ragged rows");
    flat.insert(flat.end(), r.begin(), r.end());
  }
  hid_t space = checked(H5Screate_simple(2, dims, nullptr), "dataspace");
  hid_t ds = checked(H5Dcreate2(group, name.c_str(), H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "dataset digests/" + name);
  if (!flat.empty())
    check(H5Dwrite(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat.data()), "write digests/" + name);
  H5Dclose(ds);
  H5Sclose(space);
}

std::vector<std::vector<uint64_t>> read_digests(hid_t file, const std::string& name, size_t cols, size_t steps,
                                                const std::string& path) {
  hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  if (ds < 0) throw std::runtime_error(path + ": missing dataset /" + name);
  hid_t space = H5Dget_space(ds);
  hid_t type = H5Dget_type(ds);
  hsize_t dims[2] = {0, 0};
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank == 2) H5Sget_simple_extent_dims(space, dims, nullptr);
  const bool integer = H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 8;
  H5Tclose(type);
  if (rank != 2 || dims[1] != cols || dims[0] != steps || !integer ||
      (dims[1] > 0 && dims[0] > kMaxElements / dims[1])) {
    H5Sclose(space);
    H5Dclose(ds);
    throw std::runtime_error(path + ": dataset /" + name + " must be (steps x tensors) = (" + std::to_string(steps) +
                             " x " + std::to_string(cols) +
                             ") uint64, one column per name in /digests attribute 'tensors'");
  }
  std::vector<uint64_t> flat(dims[0] * dims[1]);
  herr_t rc = flat.empty() ? 0 : H5Dread(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat.data());
  H5Sclose(space);
  H5Dclose(ds);
  if (rc < 0) throw std::runtime_error(path + ": dataset /" + name + " could not be read");
  std::vector<std::vector<uint64_t>> rows(dims[0]);
  for (hsize_t i = 0; i < dims[0]; ++i) rows[i].assign(flat.begin() + i * cols, flat.begin() + (i + 1) * cols);
  return rows;
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* op_data) {
  static_cast<std::vector<std::string>*>(op_data)->push_back(name);
  return 0;
}

// The names in a group of the file (none if the group does not exist), as the file spells them (to open them by):
// stored in a TrajectoryFile only through io::printable_text.
std::vector<std::string> group_members(hid_t file, const char* group) {
  std::vector<std::string> names;
  if (H5Lexists(file, group, H5P_DEFAULT) > 0) {
    hid_t g = H5Gopen2(file, group, H5P_DEFAULT);
    hsize_t i = 0;
    H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, &i, collect_name, &names);
    H5Gclose(g);
  }
  return names;
}

herr_t collect_attr(hid_t loc, const char* name, const H5A_info_t*, void* op_data) {
  auto* out = static_cast<std::map<std::string, std::string>*>(op_data);
  hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
  hid_t type = H5Aget_type(attr);
  // one string only: an attribute of several elements would be read past the one buffer (or pointer) given to H5Aread
  hid_t space = H5Aget_space(attr);
  const hssize_t elements = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
  if (space >= 0) H5Sclose(space);
  if (elements != 1) {
    H5Tclose(type);
    H5Aclose(attr);
    return 0;
  }
  if (H5Tget_class(type) == H5T_STRING && !H5Tis_variable_str(type) && H5Tget_size(type) <= (size_t{64} << 20)) {
    std::string buf(H5Tget_size(type), '\0');
    H5Aread(attr, type, buf.data());
    buf.resize(strnlen(buf.c_str(), buf.size()));
    (*out)[name] = buf;
  } else if (H5Tget_class(type) == H5T_STRING) {  // variable-length (what h5py writes for a Python str)
    hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    char* buf = nullptr;
    if (H5Aread(attr, mem, &buf) >= 0 && buf) {
      (*out)[name] = buf;
      H5free_memory(buf);
    }
    H5Tclose(mem);
  }
  H5Tclose(type);
  H5Aclose(attr);
  return 0;
}
}  // namespace

void make_attributes_printable(std::map<std::string, std::string>& attributes, const std::string& where) {
  for (const auto& [key, value] : attributes) {
    const size_t bad = io::first_unprintable(value);
    bool exact = false;
    for (const char* k : kExactAttributes) exact |= key == k;
    if (bad == std::string::npos || !exact) continue;
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(value[bad]));
    throw std::runtime_error(where + ": attribute '" + key + "' is '" + io::printable_text(value) +
                             "', not printable UTF-8 text (byte " + byte + " at offset " + std::to_string(bad) +
                             (io::first_invalid_utf8(value) == bad ? " is not UTF-8" : " is a control character") +
                             "); it selects what ampcheck does with the file, so it must be exact. HINT: write "
                             "attributes as UTF-8 text without control characters (h5py: a Python str; JSON lines: a "
                             "JSON string)");
  }
  // printable text kept exactly: printable keys first; an escaped key never replaces one (a file may hold both
  // "caf\xE9" as bytes and "caf\\xE9" spelled out)
  std::map<std::string, std::string> printable;
  for (const auto& [key, value] : attributes)
    if (io::first_unprintable(key) == std::string::npos) printable[key] = io::printable_text(value);
  for (const auto& [key, value] : attributes)
    if (io::first_unprintable(key) != std::string::npos)
      printable.emplace(io::printable_text(key), io::printable_text(value));
  attributes = std::move(printable);
}

void write_trajectory(const std::string& path, const TrajectoryFile& file, bool overwrite) {
  struct stat st;
  if (!overwrite && ::stat(path.c_str(), &st) == 0)
    throw std::runtime_error(path + ": exists; refusing to overwrite. HINT: pass --force to replace it");
  io::remove_stale_temporaries(path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  ::close(io::create_temporary(tmp));  // made new here (never through a planted link); HDF5 then truncates that file
  hid_t f = checked(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "create " + tmp);
  try {
    write_string_attr(f, "format", "ampcheck-trajectory");
    write_string_attr(f, "format_version", std::to_string(kTrajectoryFormatVersion));
    for (const auto& [k, v] : attribute_map(file.attributes))  // a file read back carries these; this writer sets them
      if (k != "format" && k != "format_version" && k != "events") write_string_attr(f, k, v);
    hid_t steps = checked(H5Gcreate2(f, "steps", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group steps");
    const auto& t = file.trajectory;
    for (int c = 0; c < kNumColumns; ++c) write_column(steps, column_name(c), t.column(c));
    H5Gclose(steps);
    hid_t series = checked(H5Gcreate2(f, "series", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group series");
    for (const auto& [name, values] : file.series) write_column(series, name, values);
    H5Gclose(series);
    if (!file.noise_runs.empty()) {
      hid_t noise = checked(H5Gcreate2(f, "noise", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group noise");
      for (const auto& nr : file.noise_runs) {
        hid_t g = checked(H5Gcreate2(noise, nr.label.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                          "group noise/" + nr.label);
        for (int c = 0; c < kNumColumns; ++c) write_column(g, column_name(c), nr.trajectory.column(c));
        H5Gclose(g);
      }
      H5Gclose(noise);
    }
    if (!t.fp8.empty()) {  // /fp8: attribute casts (names, one per line) + saturated / flushed / scale (steps x casts)
      hid_t g = checked(H5Gcreate2(f, "fp8", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group fp8");
      std::string names;
      for (const auto& c : t.fp8.casts) names += c + "\n";
      write_string_attr(g, "casts", names);
      write_matrix(g, "saturated", t.fp8.saturated, t.fp8.casts.size());
      write_matrix(g, "flushed", t.fp8.flushed, t.fp8.casts.size());
      write_matrix(g, "scale", t.fp8.scale, t.fp8.casts.size());
      H5Gclose(g);
    }
    if (!t.digests.empty()) {  // /digests: attribute tensors (names, one per line) + params / grads (steps x tensors)
      hid_t g = checked(H5Gcreate2(f, "digests", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group digests");
      std::string names;
      for (const auto& n : t.digests.tensors) names += n + "\n";
      write_string_attr(g, "tensors", names);
      write_digests(g, "params", t.digests.params, t.digests.tensors.size());
      write_digests(g, "grads", t.digests.grads, t.digests.tensors.size());
      H5Gclose(g);
    }
    std::string events;
    for (const auto& e : t.events) events += e + "\n";
    write_string_attr(f, "events", events);
    check(H5Fclose(f), "close " + tmp);
  } catch (...) {
    H5Fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": rename from " + tmp + " failed");
  }
}

TrajectoryFile read_trajectory(const std::string& path, Columns required) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 && errno == ENOENT)
      throw std::runtime_error(path +
                               ": does not exist. HINT: check the path (a file the command was to write: "
                               "re-run the command that writes it)");
    throw std::runtime_error(path + ": cannot open as HDF5. HINT: re-run to regenerate it");
  }
  TrajectoryFile out;
  std::map<std::string, std::string> attributes;
  hsize_t idx = 0;
  H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, collect_attr, &attributes);
  try {
    make_attributes_printable(attributes, path);
  } catch (...) {
    H5Fclose(f);
    throw;
  }
  if (attributes["format"] != "ampcheck-trajectory") {
    H5Fclose(f);
    throw std::runtime_error(path + ": not an ampcheck trajectory file (attribute 'format')");
  }
  if (attributes["format_version"] != std::to_string(kTrajectoryFormatVersion)) {
    H5Fclose(f);
    throw std::runtime_error(path + ": trajectory format version " + attributes["format_version"] + ", expected " +
                             std::to_string(kTrajectoryFormatVersion) + ". HINT: re-record it with this ampcheck");
  }
  std::string ev = attributes["events"];  // the trajectory's events, one per line: Trajectory::events, below
  attributes.erase("events");
  try {
    out.attributes = parse_run_attributes(attributes, path);
  } catch (...) {
    H5Fclose(f);
    throw;
  }
  std::vector<std::vector<double>> cols(kNumColumns);
  try {
    for (int c = 0; c < kNumColumns; ++c) {
      const std::string name = std::string("steps/") + column_name(c);
      if (required == Columns::LossRequired && c != kLoss && H5Lexists(f, "steps", H5P_DEFAULT) > 0 &&
          H5Lexists(f, name.c_str(), H5P_DEFAULT) <= 0)
        continue;  // optional column, absent: NaN below
      if (c == kLoss && (H5Lexists(f, "steps", H5P_DEFAULT) <= 0 || H5Lexists(f, name.c_str(), H5P_DEFAULT) <= 0))
        throw std::runtime_error(path +
                                 ": column /steps/loss is missing: `loss` (one float64 value per step) is required");
      cols[c] = read_column(f, name, path);
      out.columns_present.push_back(column_name(c));
      if (cols[c].size() != cols[kLoss].size())
        throw std::runtime_error(path + ": column /steps/" + column_name(c) + " has " + std::to_string(cols[c].size()) +
                                 " values, expected one per step like /steps/loss (" +
                                 std::to_string(cols[kLoss].size()) + ")");
    }
    for (int c = 0; c < kNumColumns; ++c)
      if (cols[c].empty()) cols[c].assign(cols[kLoss].size(), std::numeric_limits<double>::quiet_NaN());
    for (const auto& name : group_members(f, "series"))
      out.series[io::printable_text(name)] = read_column(f, "series/" + name, path);
    if (H5Lexists(f, "fp8", H5P_DEFAULT) > 0) {
      hid_t g = H5Gopen2(f, "fp8", H5P_DEFAULT);
      std::map<std::string, std::string> attrs;
      hsize_t ai = 0;
      H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_NATIVE, &ai, collect_attr, &attrs);
      H5Gclose(g);
      make_attributes_printable(attrs, path + ": group /fp8");
      std::string names = attrs["casts"];
      for (size_t pos; (pos = names.find('\n')) != std::string::npos; names.erase(0, pos + 1))
        out.trajectory.fp8.casts.push_back(names.substr(0, pos));
      if (out.trajectory.fp8.casts.empty()) throw std::runtime_error(path + ": group /fp8 has no attribute 'casts'");
      const size_t nc = out.trajectory.fp8.casts.size();
      out.trajectory.fp8.saturated = read_matrix(f, "fp8/saturated", nc, path);
      out.trajectory.fp8.flushed = read_matrix(f, "fp8/flushed", nc, path);
      out.trajectory.fp8.scale = read_matrix(f, "fp8/scale", nc, path);
      const size_t steps = cols[kLoss].size();
      for (const auto* m : {&out.trajectory.fp8.saturated, &out.trajectory.fp8.flushed, &out.trajectory.fp8.scale})
        if (m->size() != steps)
          throw std::runtime_error(path + ": /fp8 datasets have " + std::to_string(m->size()) +
                                   " rows, expected one per step (" + std::to_string(steps) + ")");
    }
    if (H5Lexists(f, "digests", H5P_DEFAULT) > 0) {
      hid_t g = H5Gopen2(f, "digests", H5P_DEFAULT);
      std::map<std::string, std::string> attrs;
      hsize_t ai = 0;
      H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_NATIVE, &ai, collect_attr, &attrs);
      H5Gclose(g);
      make_attributes_printable(attrs, path + ": group /digests");
      std::string names = attrs["tensors"];
      for (size_t pos; (pos = names.find('\n')) != std::string::npos; names.erase(0, pos + 1))
        out.trajectory.digests.tensors.push_back(names.substr(0, pos));
      if (out.trajectory.digests.tensors.empty())
        throw std::runtime_error(path +
                                 ": group /digests has no attribute 'tensors' (the parameter names, one per line)");
      const size_t nt = out.trajectory.digests.tensors.size(), steps = cols[kLoss].size();
      out.trajectory.digests.params = read_digests(f, "digests/params", nt, steps, path);
      out.trajectory.digests.grads = read_digests(f, "digests/grads", nt, steps, path);
    }
    for (const auto& label : group_members(f, "noise")) {
      LabelledTrajectory nr{io::printable_text(label), {}};
      std::vector<std::vector<double>> nc(kNumColumns);
      for (int c = 0; c < kNumColumns; ++c) nc[c] = read_column(f, "noise/" + label + "/" + column_name(c), path);
      nr.trajectory.rows.resize(nc[0].size());
      for (size_t i = 0; i < nc[0].size(); ++i)
        for (int c = 0; c < kNumColumns; ++c)
          nr.trajectory.rows[i][c] = i < nc[c].size() ? nc[c][i] : std::numeric_limits<double>::quiet_NaN();
      out.noise_runs.push_back(std::move(nr));
    }
  } catch (...) {
    H5Fclose(f);
    throw;
  }
  H5Fclose(f);
  const hsize_t n = cols[0].size();
  out.trajectory.rows.resize(n);
  for (hsize_t i = 0; i < n; ++i)
    for (int c = 0; c < kNumColumns; ++c) out.trajectory.rows[i][c] = cols[c][i];
  size_t pos;
  while ((pos = ev.find('\n')) != std::string::npos) {
    out.trajectory.events.push_back(ev.substr(0, pos));
    ev.erase(0, pos + 1);
  }
  return out;
}

}  // namespace ampcheck::trajectory
