"""ampcheck.judge / make_reference / validate / load_reference with arguments of the wrong type: AmpcheckError naming the
argument and what was expected, before the native core is asked (issue 51: pybind11's "incompatible function
arguments" TypeError reached users)."""

import pytest

import ampcheck

CASES = [
    (lambda: ampcheck.judge(5, "ref.h5"), "run=5: expected a path"),
    (lambda: ampcheck.judge("run.h5", 3.0), "reference=3.0: expected a path"),
    (lambda: ampcheck.judge("run.h5", "ref.h5", strategy=3), "strategy=3: expected a string"),
    (lambda: ampcheck.judge("run.h5", "ref.h5", strict=1), "strict=1: expected True or False"),
    (lambda: ampcheck.judge("run.h5", "ref.h5", steps=0), "steps=0: expected a whole number"),
    (lambda: ampcheck.load_reference(None), "path=None: expected a path"),
    (lambda: ampcheck.make_reference("a.h5", [1], "o.h5"), r"spread\[0\]=1: expected a path"),
    (lambda: ampcheck.make_reference("a.h5", "seed:b.h5", "o.h5"), "expected a list of"),
    (lambda: ampcheck.make_reference("a.h5", ["b.h5"], "o.h5", force="yes"), "force='yes': expected True or False"),
    (lambda: ampcheck.validate(steps="x"), "steps='x': expected a whole number"),
    (lambda: ampcheck.validate(replays=0), "replays=0: expected a whole number, at least 1"),
    (lambda: ampcheck.validate(scenarios=[1]), r"scenarios\[0\]=1: expected a string"),
    (lambda: ampcheck.validate(log=5), "log=5: expected a function"),
]


@pytest.mark.parametrize("call,message", CASES)
def test_a_wrong_argument_type_is_named(call, message):
    with pytest.raises(ampcheck.AmpcheckError, match=message):
        call()


def test_importing_ampcheck_does_not_import_torch():
    """`import ampcheck`, its errors and the console command's module load no torch (about 2 s a process); a name that
    needs torch loads it when first used, and every name of __all__ is there."""
    import os
    import subprocess
    import sys

    code = (
        "import sys, ampcheck, ampcheck.cli\n"
        "assert 'torch' not in sys.modules, 'import ampcheck imported torch'\n"
        "ampcheck.AmpcheckError, ampcheck.__version__\n"
        "assert 'torch' not in sys.modules, 'ampcheck.AmpcheckError imported torch'\n"
        "missing = [n for n in ampcheck.__all__ if not hasattr(ampcheck, n)]\n"
        "assert not missing, missing\n"
        "assert 'torch' in sys.modules and ampcheck.Recorder.__module__ == 'ampcheck.recorder'\n"
        "import ampcheck.preflight\n"  # the submodule bound by the import: the package's preflight stays the function
        "from ampcheck import preflight\n"
        "assert callable(preflight) and preflight.__module__ == 'ampcheck.preflight', preflight\n"
    )
    where = os.path.dirname(os.path.dirname(os.path.abspath(ampcheck.__file__)))  # the package this suite tests
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [where, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
