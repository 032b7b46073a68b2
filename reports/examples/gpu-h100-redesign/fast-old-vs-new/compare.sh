export PATH=/opt/torch/.venv/bin:$PATH AMPCHECK_PYTHON=/opt/torch/.venv/bin/python3 CUBLAS_WORKSPACE_CONFIG=:4096:8
# (old-tree: `git archive aaafae0 harness CMakeLists.txt cmake ci scenarios references/cuda-sm90 python`, untracked)
( cd old-tree && BUILD_DIR=build-old JOBS=8 bash ci/build.sh > $OUT/old-build.log 2>&1; echo old build rc=$? ) &
( BUILD_DIR=build-gpu JOBS=8 bash ci/build.sh > $OUT/new-build.log 2>&1; echo new build rc=$? ) &
wait
S="fp16-half-gradscaler fp16-pure-adamw bf16-pure-small-lr fp16-pure-underflow-stalls fp16-master-weights resume-with-scaler-state resume-without-scaler-state fp16-master-activation-overflow bf16-autocast fp16-autocast-scaler"
F=""; for s in $S; do F="$F scenarios/sensitivity/gpt2/$s.yaml"; done
# (old-tree: `git archive aaafae0 harness CMakeLists.txt cmake ci scenarios references/cuda-sm90 python`, untracked)
( cd old-tree && build-old/ampcheck check $F --device cuda --engine fast --out /tmp/cmp-old --force > /tmp/cmp-old.log 2>&1; echo old check rc=$? ) &
( build-gpu/ampcheck check $F --device cuda --engine fast --out /tmp/cmp-new --force > /tmp/cmp-new.log 2>&1; echo new check rc=$? ) &
wait
mkdir -p $OUT/old/gpu $OUT/new/gpu; cp /tmp/cmp-old/summary.json $OUT/old/gpu/; cp /tmp/cmp-new/summary.json $OUT/new/gpu/; cp /tmp/cmp-old.log /tmp/cmp-new.log $OUT/
python3 ci/same_results.py $OUT/old $OUT/new gpu | tail -15
grep -E "gpt2 " /tmp/cmp-new.log | head -12
