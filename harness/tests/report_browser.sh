#!/usr/bin/env bash
# report.html in a real browser: `ampcheck check` writes a run directory for three scenarios with different outcomes
# (tracks, nonfinite with a planted event, an error at step 0); headless Chromium (Debian's chromium, installed by
# ci/setup.sh) loads report.html from disk with the network disabled, and check_report_render.py verifies the DOM
# Chromium built (a section per scenario with its three charts drawn, the strategy comparison's bars) and the pixels
# of its screenshot (the chart colours are on screen).
set -euo pipefail
ampcheck=$1; src=$2
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "FAIL: no chromium on PATH; ci/setup.sh installs Debian's chromium package"; exit 1; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$ampcheck" check "$src/scenarios/fp32.yaml" "$src/scenarios/bf16-autocast-inf-no-scaler.yaml" \
  "$src/scenarios/fp16-half-gradscaler.yaml" --device cpu --out "$work/run" > "$work/check.log" || { cat "$work/check.log"; exit 1; }
# self-contained: no script, no URL but the SVG namespace
if grep -o "https\?://[^\"' )]*" "$work/run/report.html" | grep -vxq "http://www.w3.org/2000/svg" ||
   grep -qi "<script\|<link\|<img" "$work/run/report.html"; then
  echo "FAIL: report.html loads something from outside itself"; exit 1
fi
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --disable-extensions
       --proxy-server=127.0.0.1:9 --user-data-dir="$work/profile")
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$work/run/report.html" > "$work/dom.html" 2> "$work/browser.log" ||
  { tail -20 "$work/browser.log"; echo "FAIL: chromium --dump-dom"; exit 1; }
timeout 120 "$browser" "${flags[@]}" --window-size=1400,2600 --screenshot="$work/shot.png" "file://$work/run/report.html" \
  >> "$work/browser.log" 2>&1 || { tail -20 "$work/browser.log"; echo "FAIL: chromium --screenshot"; exit 1; }
python3 "$(dirname "$0")/check_report_render.py" "$work/run/summary.json" "$work/dom.html" "$work/shot.png"
