#!/usr/bin/env bash
# Resource limits on input: an absurd step count, an absurd accumulation, a JSON line of 8 MiB, a million columns in
# one JSON line, YAML nested 100,000 deep, an HDF5 file declaring 300 million steps — each ends the command with exit 2 and a message naming the file (and the
# field or line), within 30 s and without training. Usage: resource_limits.sh AMPCHECK SOURCE_DIR PYTHON
set -uo pipefail
amp=$1; src=$2; py=$3
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
ref=$(ls "$src"/references/cpu/*.h5 | head -1)
fails=0
expect() {  # expect NAME PATTERN -- command...
  local name=$1 pattern=$2; shift 3
  local rc=0
  timeout 30 "$@" > "$work/$name.log" 2>&1 || rc=$?
  if [ $rc -ne 2 ] || ! grep -qE -- "$pattern" "$work/$name.log"; then
    echo "FAIL: $name: exit $rc (wanted 2 and /$pattern/):"; tail -c 400 "$work/$name.log"; echo; fails=$((fails + 1))
  else
    echo "ok: $name: $(head -1 "$work/$name.log" | cut -c1-160)"
  fi
}
base='name: big\nwhy: w\nmodel: {kind: gpt, preset: micro}\nstrategy: fp32\n'
printf "${base}train: {steps: 1000000000000}\n" > "$work/steps.yaml"
expect steps "steps.yaml:5:.*train.steps: must be at most 10000000" -- "$amp" run "$work/steps.yaml" --out "$work/o1"
printf "${base}train: {steps: 10, micro_batches: 100000000}\n" > "$work/micro.yaml"
expect micro_batches "micro.yaml:5:.*train.micro_batches: must be at most 65536" -- "$amp" run "$work/micro.yaml" --out "$work/o2"
"$py" -c "
import json, sys
d = sys.argv[1]
open(d + '/long.jsonl', 'w').write(json.dumps({'step': 0, 'loss': 1.0, 'x': 'a' * (8 << 20)}) + '\n')
open(d + '/wide.jsonl', 'w').write(json.dumps({f'c{i}': 1 for i in range(1000000)}) + '\n')
open(d + '/deep.yaml', 'w').write('name: deep\nwhy: w\nmodel: ' + '[' * 100000 + ']' * 100000 + '\n')
" "$work"
expect long_line "long.jsonl:1: a line longer than 4 MiB" -- "$amp" judge "$work/long.jsonl" --reference "$ref" --out "$work/o3"
expect million_columns "wide.jsonl:1: a line longer than 4 MiB" -- "$amp" judge "$work/wide.jsonl" --reference "$ref" --out "$work/o4"
# an HDF5 trajectory declaring 300 million steps (a compressed dataset of zeros, 140 KB on disk) and a string
# attribute of 3,000 elements (read as one string it would overrun its buffer)
"$py" -c "
import h5py, numpy as np, shutil, sys
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], 'a') as f:
    del f['steps/loss']
    f.create_dataset('steps/loss', shape=(300_000_000,), dtype='f8', chunks=(1 << 20,), compression='gzip')
    f.attrs.create('multi', np.array([b'a', b'b', b'c'] * 1000, dtype=h5py.string_dtype()))
" "$src/harness/fuzz/corpus/hdf5/run.h5" "$work/bomb.h5"
expect hdf5_steps "bomb.h5: dataset /steps/loss has more than 10,000,000 steps" -- "$amp" judge "$work/bomb.h5" --reference "$ref" --out "$work/o6"
expect cli_steps "--steps: expected a number from 0 to 10000000, got '99999999999'" -- "$amp" check "$work/steps.yaml" --steps 99999999999 --out "$work/o7"
expect cli_jobs "--jobs: expected a number from 0 to 256, got 'nan'" -- "$amp" check "$work/steps.yaml" --jobs nan --out "$work/o8"
expect deep_yaml "deep.yaml:[0-9]+:[0-9]+: nested too deeply" -- "$amp" run "$work/deep.yaml" --out "$work/o5"
exit $fails
