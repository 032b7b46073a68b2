// ampcheck._native — the Python extension module of the `ampcheck` package (pybind11, the headers the torch package
// ships): thin bindings over the use cases (harness/usecases), the same functions `ampcheck judge`, `reference` and
// `validate` call, so the package's in-process API (python/src/ampcheck/api.py) gives the command line's verdicts,
// margins and messages exactly. Results cross as the records' own JSON (io/record_json.h: summary.json's rows, field
// for field and number for number); api.py turns them into typed dataclasses. Errors (std::exception: the use cases'
// bad-input messages name the file) become ampcheck.AmpcheckError. The GIL is released while C++ works.
#include "usecases/recordings.h"
#include "usecases/usecases.h"

#include "io/record_json.h"
#include "io/text.h"
#include "report/summary.h"

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlfcn.h>

#include <memory>
#include <ostream>
#include <stdexcept>
#include <streambuf>
#include <string>
#include <vector>

namespace py = pybind11;

namespace ampcheck::python {

namespace {

// ---------------------------------------------------------------------------------------------------------------------
// Records into JSON text (the summary.json writer's derivation: io::record_to_json, then printable strings).

std::string row_json(const report::ScenarioSummary& row) {
  nlohmann::json j = io::record_to_json(row);
  io::make_json_strings_printable(j);
  return j.dump();
}

std::string suite_json(const usecases::SuiteResult& r) {
  nlohmann::json j;
  j["skipped"] = r.skipped;
  j["written"] = r.written;
  j["reports_dir"] = r.reports_dir;
  j["notes"] = r.notes;
  j["exit_code"] = r.exit_code();
  j["passed"] = r.summary.passed();
  j["failed"] = r.summary.failed();
  j["scenarios"] = nlohmann::json::array();
  for (const auto& row : r.summary.scenarios) j["scenarios"].push_back(io::record_to_json(row));
  io::make_json_strings_printable(j);
  return j.dump();
}

// ---------------------------------------------------------------------------------------------------------------------
// A reference read once (and checked: it has noise runs), judged against many times — the live guard's case.

struct LoadedReference {
  std::string path;
  std::shared_ptr<const trajectory::TrajectoryFile> file;
};

LoadedReference load_reference(const std::string& path) {
  py::gil_scoped_release unlocked;
  return {path, std::make_shared<const trajectory::TrajectoryFile>(usecases::read_reference(path))};
}

std::vector<std::string> noise_labels(const LoadedReference& r) {
  std::vector<std::string> labels;
  for (const auto& nr : r.file->noise_runs) labels.push_back(nr.label);
  return labels;
}

// One run judged as `ampcheck judge RUN --reference REF [--expect E] [--strategy S] [--strict] [--first-steps N]`
// judges it (usecases::judge_recording); nothing written. Returns the summary row as JSON.
std::string judge(const std::string& run, const LoadedReference& reference, const std::string& expect,
                  const std::string& strategy, int64_t first_steps, bool strict, bool written_here) {
  usecases::JudgeInputs j;
  j.runs = {run};
  j.reference = reference.path;
  j.expect = expect;
  j.strategy = strategy;
  j.first_steps = first_steps;
  j.runs_written_here = written_here;
  report::ScenarioSummary row;
  {
    py::gil_scoped_release unlocked;
    row = usecases::judge_recording(run, *reference.file, reference.path, j, "", strict);
  }
  return row_json(row);
}

// `ampcheck reference FP32_RUN --spread ... --out OUT [--force]`.
py::dict make_reference(const std::string& fp32_run, const std::vector<std::string>& spread, const std::string& out,
                        bool force) {
  usecases::ReferenceResult r;
  {
    py::gil_scoped_release unlocked;
    r = usecases::make_reference({fp32_run, spread, out, force});
  }
  py::dict d;
  d["path"] = r.path;
  d["steps"] = r.steps;
  d["noise_labels"] = r.noise_labels;
  return d;
}

// Progress lines of a use case to a Python callable, a line at a time (the GIL taken for each call).
class LineSink : public std::streambuf {
 public:
  explicit LineSink(std::function<void(const std::string&)> emit) : emit_(std::move(emit)) {}
  ~LineSink() override { flush_line(); }

 protected:
  int_type overflow(int_type c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    if (c == '\n') flush_line();
    else
      line_.push_back(static_cast<char>(c));
    return c;
  }

 private:
  void flush_line() {
    if (line_.empty() || !emit_) return;
    const std::string text = io::printable_text(line_);
    line_.clear();
    py::gil_scoped_acquire locked;
    try {
      emit_(text);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("ampcheck progress callback");  // a broken callback never ends the work
    }
  }
  std::function<void(const std::string&)> emit_;
  std::string line_;
};

// `ampcheck validate [--scenario ...] [--suite S] [--device D] [--references DIR] [--steps N] [--out DIR] [--force]
// [--plant P ...] [--replays N]`: the validation suite against its goldens. Returns the SuiteResult as JSON.
std::string validate(const std::vector<std::string>& scenarios, const std::string& suite, const std::string& device,
                     const std::string& references, const std::string& out_dir, int64_t steps, bool force,
                     const std::vector<std::string>& plants, int64_t replays,
                     const std::function<void(const std::string&)>& log) {
  usecases::RunOptions opts;
  opts.scenarios = scenarios;
  opts.suite = suite;
  opts.device = device;
  opts.references = references;
  opts.out_dir = out_dir;
  opts.steps = steps;
  opts.force = force;
  usecases::ValidateOptions v;
  v.plants = plants;
  v.replays = replays;
  usecases::SuiteResult r;
  {
    py::gil_scoped_release unlocked;
    LineSink sink(log);
    std::ostream out(&sink);
    r = usecases::validate_stack(opts, v, out);
  }
  return suite_json(r);
}

// ---------------------------------------------------------------------------------------------------------------------
// A private C++ runtime: the core symbols of libstdc++'s streams and locales defined inside a shared object (a link
// that put libstdc++.a into it, e.g. -static-libstdc++ from the environment). Loaded into a Python whose torch already
// loaded libstdc++.so, part of the object's calls bind to the process's copy and part stay in its own, whose locale
// facets were never set up: `ostream << double` crashes (GCC 13: the live guard's SIGSEGV on the H100 machine) or
// prints nothing (GCC 12). Returns the symbols found ("" = none: safe); `path` "" = this module itself.
std::string private_cxx_runtime(const std::string& path) {
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void*>(&private_cxx_runtime), &self) || self.dli_fname == nullptr) return "";
  const std::string object = path.empty() ? std::string(self.dli_fname) : path;
  void* handle = dlopen(object.c_str(), RTLD_LAZY | RTLD_LOCAL | (path.empty() ? RTLD_NOLOAD : 0));
  if (handle == nullptr) throw std::runtime_error(object + ": cannot open it (" + std::string(dlerror()) + ")");
  std::string found;
  // std::locale::classic(), ios_base::Init::Init(), ostream::_M_insert<double>: defined in libstdc++ alone
  for (const char* symbol : {"_ZNSt6locale7classicEv", "_ZNSt8ios_base4InitC1Ev", "_ZNSo9_M_insertIdEERSoT_"}) {
    void* address = dlsym(handle, symbol);
    Dl_info where{};
    if (address != nullptr && dladdr(address, &where) && where.dli_fname != nullptr) {
      // the same file: both names as the dynamic loader reports them
      Dl_info mine{};
      void* own = dlsym(handle, "PyInit__native");
      const char* own_file = own != nullptr && dladdr(own, &mine) ? mine.dli_fname : object.c_str();
      if (std::string(where.dli_fname) == own_file) found += (found.empty() ? "" : " ") + std::string(symbol);
    }
  }
  dlclose(handle);
  return found;
}

}  // namespace

}  // namespace ampcheck::python

PYBIND11_MODULE(_native, m) {
  using namespace ampcheck::python;
  m.doc() = "ampcheck's C++ core for the Python package (use ampcheck.judge / make_reference / validate)";
  // every error of the use cases (bad input names the file) as ampcheck.AmpcheckError, defined in Python so that it
  // exists without this module
  static py::handle error_type = py::object(py::module_::import("ampcheck._errors").attr("AmpcheckError")).release();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::error_already_set&) {
      throw;
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const std::exception& e) {
      PyErr_SetString(error_type.ptr(), ampcheck::io::printable_text(e.what()).c_str());
    }
  });
  py::class_<LoadedReference>(m, "Reference", "a reference file read and checked once (ampcheck.load_reference)")
      .def_property_readonly("path", [](const LoadedReference& r) { return r.path; })
      .def_property_readonly("steps", [](const LoadedReference& r) { return r.file->trajectory.size(); })
      .def_property_readonly("noise_labels", &noise_labels);
  m.def("load_reference", &load_reference, py::arg("path"));
  m.def("judge", &judge, py::arg("run"), py::arg("reference"), py::arg("expect"), py::arg("strategy"),
        py::arg("first_steps"), py::arg("strict"), py::arg("written_here") = false);
  m.def("make_reference", &make_reference, py::arg("fp32_run"), py::arg("spread"), py::arg("out"), py::arg("force"));
  m.def("validate", &validate, py::arg("scenarios"), py::arg("suite"), py::arg("device"), py::arg("references"),
        py::arg("out_dir"), py::arg("steps"), py::arg("force"), py::arg("plants"), py::arg("replays"), py::arg("log"));
  m.def("version", [] { return std::string(AMPCHECK_VERSION); });
  m.def("private_cxx_runtime", &private_cxx_runtime, py::arg("path") = std::string());
}
