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
