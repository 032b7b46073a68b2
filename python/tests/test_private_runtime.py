"""Issue 51, finding 1 — the live guard's SIGSEGV of the training process on the H100 machine, its mechanism on the CPU.

There (device tool, 2026-12-07) the native core's judge crashed in every in-process call, with or without h5py or CUDA
in the process, while the `ampcheck` command judged the same files: the module carried a private copy of libstdc++'s
streams and locales (its own `std::ostream::_M_insert<double>`, found by the backtrace), linked in beside the
libstdc++.so that torch loads. Part of its calls bind to the process's copy and part stay in its own, whose locale
facets were never set up: `ostream << double` dies with GCC 13 (there) and prints nothing with GCC 12 (here).

The build makes the module twice more, linked with -static-libstdc++ (CMake: private-runtime/): `unguarded` as the
H100 build was, `guarded` with the shared libstdc++ linked first (cmake/PythonExtension.cmake). Shown here: the
unguarded one carries the runtime and its judge loses its numbers (or crashes); the guarded one carries none and
judges exactly as the normal build; the loader refuses the unguarded one and the live guard then judges through the
`ampcheck` command, to the end of the run."""

import glob
import os
import subprocess
import sys

import pytest

import guard_util

BUILD = os.environ.get("AMPCHECK_BUILD_DIR", "")
# the build's modules are this test's subject: run by CTest cpu.python_native_safety, which names the build
pytestmark = pytest.mark.skipif(not BUILD, reason="AMPCHECK_BUILD_DIR (the build with the test modules) not given")
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def module(kind):
    found = glob.glob(os.path.join(BUILD, "private-runtime", kind, "python", "ampcheck", "_native*.so"))
    if not found:
        pytest.skip(f"no {kind} private-runtime module in {BUILD!r} (the compiler has no static libstdc++)")
    return found[0]


CHILD = r"""
import importlib.util, json, sys
import torch  # libstdc++.so loaded first, as in a training process
spec = importlib.util.spec_from_file_location("ampcheck._native", sys.argv[1])
m = importlib.util.module_from_spec(spec)
sys.path.insert(0, sys.argv[4]); sys.modules["ampcheck._native"] = m; spec.loader.exec_module(m)
print("PRIVATE", m.private_cxx_runtime(), flush=True)
row = json.loads(m.judge(sys.argv[2], m.load_reference(sys.argv[3]), "", "", 0, False, True))
print("MESSAGE", row["message"], flush=True)
"""


def judge_with(module_path, run, ref):
    """(private runtime symbols, the judge's message or None, the exit status) in a fresh process."""
    p = subprocess.run(
        [sys.executable, "-c", CHILD, module_path, run, ref, SRC],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = dict(line.split(" ", 1) for line in p.stdout.splitlines() if line.startswith(("PRIVATE", "MESSAGE")))
    return lines.get("PRIVATE", "").strip(), lines.get("MESSAGE"), p.returncode, p.stdout


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("private-runtime"))
    ref = guard_util.make_reference(d, 30)
    guard_util.train(f"{d}/fp16.h5", 30, fp16=True)
    return d, ref


def test_the_unguarded_module_carries_the_runtime_and_breaks_number_formatting(files):
    d, ref = files
    normal = glob.glob(os.path.join(BUILD, "python", "ampcheck", "_native*.so"))[0]
    private, message, rc, out = judge_with(module("unguarded"), f"{d}/fp16.h5", ref)
    assert "_ZNSo9_M_insertIdEERSoT_" in private or "_ZNSt6locale7classicEv" in private, out
    n_private, n_message, n_rc, n_out = judge_with(normal, f"{d}/fp16.h5", ref)
    assert n_rc == 0 and n_private == "" and n_message, n_out
    # the mechanism: a crash by a signal (GCC 13) or the message's numbers gone (GCC 12)
    assert rc < 0 or message != n_message, (out, n_out)


def test_the_guarded_module_carries_none_and_judges_as_the_normal_build(files):
    d, ref = files
    normal = glob.glob(os.path.join(BUILD, "python", "ampcheck", "_native*.so"))[0]
    private, message, rc, out = judge_with(module("guarded"), f"{d}/fp16.h5", ref)
    assert rc == 0 and private == "", out
    assert message == judge_with(normal, f"{d}/fp16.h5", ref)[1], out


LOADER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import ampcheck
from ampcheck import guard
print("AVAILABLE", ampcheck.native_available())
try:
    ampcheck.judge(sys.argv[2], sys.argv[3])
except ampcheck.AmpcheckError as e:
    print("REFUSED", e)
print("GUARD_JUDGE", getattr(guard.default_judge(), "__name__", "?"))
"""


def test_the_loader_refuses_a_private_runtime_and_the_guard_uses_the_command(files):
    d, ref = files
    unguarded_build = os.path.dirname(os.path.dirname(os.path.dirname(module("unguarded"))))
    env = dict(os.environ, BUILD_DIR=unguarded_build)
    p = subprocess.run(
        [sys.executable, "-c", LOADER, SRC, f"{d}/fp16.h5", ref],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert p.returncode == 0, p.stdout
    assert "AVAILABLE False" in p.stdout and "own copy of the C++ runtime" in p.stdout, p.stdout
    assert "GUARD_JUDGE command_judge" in p.stdout, p.stdout
