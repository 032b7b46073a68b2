#!/usr/bin/env bash
# Model dimensions and the other numbers that size a run, bounded at parse time (issue 51): `ampcheck run` on a
# scenario whose model is out of range — n_layer -3000000000 (was a SIGSEGV, exit 139, staging dir left), 1000000
# (built for minutes), -1 (trained, the head under embed's module index), negative n_embd / n_head (an `error` row
# with LibTorch's stack trace), past int64, too many parameters — and a few sizes outside the model (world_size,
# seq_len, fp8 history) ends with exit 2 within 30 s, a message naming file:line:column, the field and the range, no
# stack trace, nothing trained and no staging directory left. Usage: model_dimensions.sh AMPCHECK
set -uo pipefail
amp=$1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0
n=0
expect() {  # expect NAME 'MODEL FIELDS' PATTERN [EXTRA YAML LINE]
  local name=$1 model=$2 pattern=$3 extra=${4:-}
  n=$((n + 1))
  printf 'name: %s\nwhy: w\nmodel: {%s}\nstrategy: fp32\ntrain: {steps: 2}\n%s' "$name" "$model" "$extra" > "$work/$name.yaml"
  local rc=0
  timeout 30 "$amp" run "$work/$name.yaml" --device cpu --out "$work/out-$name" > "$work/$name.log" 2>&1 || rc=$?
  local left
  left=$(find "$work" -maxdepth 1 -name ".out-$name*" | head -1)
  if [ $rc -ne 2 ] || ! grep -qE -- "$name.yaml:[0-9]+:[0-9]+: $pattern" "$work/$name.log" ||
     grep -qE "Exception raised from|frame #" "$work/$name.log" || [ -e "$work/out-$name" ] || [ -n "$left" ]; then
    echo "FAIL: $name: exit $rc (wanted 2 and /$name.yaml:L:C: $pattern/, no stack trace, no output${left:+, left $left}):"
    tail -c 600 "$work/$name.log"; echo; fails=$((fails + 1))
  else
    echo "ok: $name: $(grep -m1 -E "$name.yaml" "$work/$name.log" | cut -c1-200)"
  fi
}
expect mlp_layers_wrapped 'kind: mlp, n_layer: -3000000000' 'model.n_layer: expected .*1 to 256.*got -3000000000'
expect mlp_layers_million 'kind: mlp, n_layer: 1000000' 'model.n_layer: expected .*1 to 256.*got 1000000'
expect mlp_layers_minus_one 'kind: mlp, n_layer: -1' 'model.n_layer: expected .*1 to 256.*got -1'
expect gpt_width_negative 'kind: gpt, preset: micro, n_embd: -32' 'model.n_embd: expected .*1 to 16384.*got -32'
expect gpt_heads_negative 'kind: gpt, preset: micro, n_head: -2' 'model.n_head: expected .*1 to 1024.*got -2'
expect llama_kv_past_int64 'kind: llama, n_kv_head: 99999999999999999999' \
  "model.n_kv_head: expected .*1 to 1024.*got '99999999999999999999'"
expect gpt_vocab_past_uint16 'kind: gpt, preset: micro, vocab_size: 70000' 'model.vocab_size: expected .*2 to 65536'
expect mlp_hidden_negative 'kind: mlp, mlp_hidden: -4' 'model.mlp_hidden: expected .*1 to 65536.*got -4'
expect gpt_too_many_parameters 'kind: gpt, n_layer: 256, n_embd: 16384' 'model: 824,693,522,432 parameters .*more than the limit of 2,000,000,000'
expect world_size_huge 'kind: gpt, preset: micro' 'distributed.world_size: must be at most 1024' \
  $'distributed: {world_size: 100000}\n'
expect seq_len_negative 'kind: gpt, preset: micro' "data.seq_len: expected .*1 to the model's block_size" \
  $'data: {seq_len: -3}\n'
echo "$((n - fails)) of $n refused as expected"
exit $fails
