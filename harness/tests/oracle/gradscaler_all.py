#!/usr/bin/env python3
"""Every PyTorch oracle of ampcheck's GradScaler for one device, in one process (harness/tests/amp/
gradscaler_oracle_test.cpp): gradscaler_oracle.py's trace for SGD and for fused AdamW, and gradscaler_errors.py's
error cases, each script's main() with the arguments it would get on its own command line. One torch import instead
of three: the import is most of each script's time. Each script seeds its own generator, so the files are what three
separate processes write (the C++ test compares them bit for bit).

Usage: gradscaler_all.py --device cpu|cuda --sgd-out DIR --adamw-fused-out DIR --errors-out FILE
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gradscaler_errors  # noqa: E402
import gradscaler_oracle  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sgd-out", required=True)
    ap.add_argument("--adamw-fused-out", required=True)
    ap.add_argument("--errors-out", required=True)
    a = ap.parse_args()
    runs = [
        (gradscaler_oracle, ["--out", a.sgd_out, "--optimizer", "sgd", "--device", a.device]),
        (gradscaler_oracle, ["--out", a.adamw_fused_out, "--optimizer", "adamw_fused", "--device", a.device]),
        (gradscaler_errors, ["--out", a.errors_out, "--device", a.device]),
    ]
    for script, args in runs:
        sys.argv = [script.__file__] + args
        script.main()


if __name__ == "__main__":
    main()
