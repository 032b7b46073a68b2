#!/usr/bin/env bash
# Text from files is untrusted (issue 39, docs/ROBUSTNESS.md "Text from files"): an attribute or a scenario string that
# is not UTF-8, or that holds a terminal escape, never ends a command in an exception without the file named
# (before: nlohmann's [json.exception.type_error.316] after the table, exit 2, no report). Checked here:
#   - judge: a run whose `strategy` or `expect` attribute is Latin-1 (they select what judge does) → exit 2 naming the
#     file and the attribute, nothing written;
#   - judge: Latin-1 and ESC sequences in labels (workload, note, run_key, the run's file name) → judged; summary.json
#     loads with Python's json (valid UTF-8), the invalid bytes as \xNN in every report; junit.xml parses; no ESC
#     byte reaches the terminal;
#   - judge: a JSON-lines run whose header holds a Latin-1 byte → exit 2 naming the file, the message printable;
#   - check: a scenario whose `name:` is Latin-1 → exit 2 naming the file, line and field, before any training.
# Usage: untrusted_text.sh AMPCHECK SOURCE_DIR PYTHON
set -euo pipefail
amp=$1; src=$2; py=$3
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ref=$(ls "$src"/references/cpu/gpt-micro-*.h5 | head -1)

# runs: the reference's own trajectory (so it tracks), with the attributes under test as fixed-length byte strings
"$py" - "$ref" "$work" <<'PY'
import sys, h5py, numpy as np
ref, work = sys.argv[1], sys.argv[2]
def run(path, attrs):
    with h5py.File(ref, "r") as r, h5py.File(path, "w") as f:
        f.attrs["format"] = np.bytes_(b"ampcheck-trajectory")
        f.attrs["format_version"] = np.bytes_(b"1")
        for k, v in attrs.items():
            f.attrs[k] = np.bytes_(v)
        r.copy("steps", f)
run(work + "/latin1-strategy.h5", {"strategy": b"fp16-\xe9t\xe9"})
run(work + "/latin1-expect.h5", {"expect": b"tr\xe4cks", "strategy": b"fp32"})
run(work.encode() + b"/r\xe9sum\xe9.h5", {"strategy": b"fp32", "workload": b"caf\xe9 batch 8",
    "note": b"\x1b]0;pwned\x07\x1b[31mred", "run_key": b"na\xefve", "timing_method": b"wall\xc2\x9bclock"})
with open(work + "/latin1.jsonl", "wb") as f:
    f.write(b'{"format": "ampcheck-trajectory", "format_version": 1, "attributes": {"strategy": "fp16-\xe9t\xe9"}}\n')
    f.write(b'{"step": 0, "loss": 2.5}\n')
PY

for attr in strategy expect; do
  f=$work/latin1-$attr.h5
  rc=0; "$amp" judge "$f" --reference "$ref" --out "$work/o-$attr" > "$work/$attr.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] || { cat "$work/$attr.log"; fail "a Latin-1 '$attr' attribute: exit $rc (wanted 2)"; }
  grep -q "$f: attribute '$attr' is '.*\\\\x[0-9A-F][0-9A-F].*', not printable UTF-8 text" "$work/$attr.log" ||
    { cat "$work/$attr.log"; fail "the refusal does not name the file and attribute '$attr'"; }
  grep -q "json.exception" "$work/$attr.log" && fail "nlohmann's exception reached the user"
  [ -e "$work/o-$attr" ] && fail "a run directory was written for a refused run"
  echo "ok: Latin-1 '$attr' refused: $(grep -o 'ampcheck: .*' "$work/$attr.log" | cut -c1-150)"
done

rc=0; "$amp" judge "$work"/r*sum*.h5 --reference "$ref" --out "$work/o" > "$work/labels.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$work/labels.log"; fail "Latin-1 / ESC labels: exit $rc (wanted 0: the run is the reference's)"; }
"$py" - "$work/o" "$work/labels.log" <<'PY'
import json, sys, xml.etree.ElementTree as ET
out, log = sys.argv[1], sys.argv[2]
s = json.load(open(out + "/summary.json", encoding="utf-8"))  # strict UTF-8: a raw 0xE9 fails here
row = s["scenarios"][0]
assert row["name"] == "r\\xE9sum\\xE9", row["name"]
assert row["workload"] == "caf\\xE9 batch 8", row["workload"]
assert row["timing_method"] == "wall\\xC2\\x9Bclock", row["timing_method"]
ET.parse(out + "/junit.xml")
for f in ("summary.md", "junit.xml", "report.html", "summary.json"):
    text = open(out + "/" + f, "rb").read().decode("utf-8")  # strict
    bad = [c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0]
    assert not bad, (f, bad[:5])
term = open(log, "rb").read()
assert b"\x1b" not in term and b"\xe9" not in term, "raw bytes reached the terminal"
print("ok: Latin-1 and ESC labels judged: name %s, workload %s; summary.json, junit.xml, summary.md, report.html "
      "valid UTF-8 without control characters" % (row["name"], row["workload"]))
PY

rc=0; "$amp" judge "$work/latin1.jsonl" --reference "$ref" --out "$work/o-jsonl" > "$work/jsonl.log" 2>&1 || rc=$?
[ $rc -eq 2 ] || { cat "$work/jsonl.log"; fail "a Latin-1 JSON-lines header: exit $rc (wanted 2)"; }
grep -q "$work/latin1.jsonl:1: not JSON" "$work/jsonl.log" || { cat "$work/jsonl.log"; fail "the JSON-lines refusal does not name file:line"; }
"$py" -c 'import sys; t = open(sys.argv[1], "rb").read(); t.decode("utf-8"); assert b"\x1b" not in t' "$work/jsonl.log" ||
  fail "the JSON-lines refusal is not printable UTF-8"
echo "ok: Latin-1 JSON-lines header refused: $(grep -o 'ampcheck: .*' "$work/jsonl.log" | cut -c1-150)"

sed 's/^name: fp32$/name: r\xe9f\xe9rence/' "$src/scenarios/fp32.yaml" > "$work/latin1-name.yaml"
grep -q $'^name: r\xe9f' "$work/latin1-name.yaml" || fail "the test scenario was not made"
rc=0; "$amp" check "$work/latin1-name.yaml" --device cpu --jobs 1 --out "$work/o-check" > "$work/check.log" 2>&1 || rc=$?
[ $rc -eq 2 ] || { cat "$work/check.log"; fail "a Latin-1 scenario name: exit $rc (wanted 2)"; }
grep -q "$work/latin1-name.yaml:1:8: name: byte 0xE9 is not UTF-8" "$work/check.log" ||
  { cat "$work/check.log"; fail "the refusal does not name the file, line and field"; }
grep -q "\[1/" "$work/check.log" && fail "check trained before refusing"
[ -e "$work/o-check" ] && fail "check wrote a run directory"
echo "ok: Latin-1 scenario name refused before training: $(grep -o 'ampcheck: .*' "$work/check.log" | cut -c1-150)"
