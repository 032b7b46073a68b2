#!/usr/bin/env python3
"""Checks what headless Chromium made of report.html (see report_browser.sh).

usage: check_report_render.py summary.json dom.html screenshot.png

DOM (as Chromium serialised it after parsing and layout): one <section class="scenario"> per scenario of
summary.json, each with exactly three charts (loss, scale, deviation); the loss chart draws the reference (a
polyline of more than one point) and, for a completed run, the run and the band; a failed run's charts say why;
the strategy comparison draws throughput and memory bars.
Pixels (the screenshot, decoded here with zlib alone): the page is not blank, and the run colour, the reference band
and the bars' colours are on screen in amounts no blank or unstyled page could produce.
"""
import json
import struct
import sys
import zlib
from html.parser import HTMLParser


class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sections = {}     # scenario -> list of charts
        self.bars = {}         # data-kind -> number of bars
        self.cur_section = None
        self.cur_chart = None
        self.in_note = False
        self.depth_section = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "").split()
        if tag == "section" and "scenario" in cls:
            self.cur_section = a.get("data-scenario")
            self.sections[self.cur_section] = []
        elif tag == "svg" and "chart" in cls:
            self.cur_chart = {"kind": a.get("data-kind"), "series": [], "band": 0, "ticks": 0, "bars": 0, "note": ""}
            if self.cur_section is not None and "bars" not in cls:
                self.sections[self.cur_section].append(self.cur_chart)
            elif "bars" in cls:
                self.bars[a.get("data-kind")] = self.cur_chart
        elif self.cur_chart is not None:
            if tag == "polyline" and "series" in cls:
                self.cur_chart["series"].append(len(a.get("points", "").split()))
            elif tag == "circle" and "series" in cls:
                self.cur_chart["series"].append(1)
            elif tag == "polygon" and "band" in cls and len(a.get("points", "").split()) > 2:
                self.cur_chart["band"] += 1
            elif tag == "line" and "tick" in cls:
                self.cur_chart["ticks"] += 1
            elif tag == "rect" and "bar" in cls:
                self.cur_chart["bars"] += 1
            elif tag == "text" and "note" in cls:
                self.in_note = True

    def handle_endtag(self, tag):
        if tag == "svg":
            self.cur_chart = None
        elif tag == "section":
            self.cur_section = None
        elif tag == "text":
            self.in_note = False

    def handle_data(self, data):
        if self.in_note and self.cur_chart is not None:
            self.cur_chart["note"] += data


def read_png(path):
    """RGBA rows of an 8-bit non-interlaced PNG (colour types 2 and 6)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, f"unsupported PNG {depth=} {ctype=} {interlace=}"
            bpp = 4 if ctype == 6 else 3
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            ul = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + left) & 255
            elif f == 2:
                line[i] = (line[i] + up) & 255
            elif f == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif f == 4:
                p = left + up - ul
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else ul)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def main():
    summary = json.load(open(sys.argv[1]))
    dom = Dom()
    dom.feed(open(sys.argv[2], encoding="utf-8").read())
    errors = []
    names = [s["name"] for s in summary["scenarios"]]
    if sorted(dom.sections) != sorted(names):
        errors.append(f"sections {sorted(dom.sections)} != scenarios {sorted(names)}")
    for s in summary["scenarios"]:
        charts = dom.sections.get(s["name"], [])
        kinds = [c["kind"] for c in charts]
        if kinds != ["loss", "scale", "deviation"]:
            errors.append(f"{s['name']}: charts {kinds}")
            continue
        loss, scale, dev = charts
        if not any(n > 1 for n in loss["series"]):
            errors.append(f"{s['name']}: loss chart draws no reference line")
        if s["verdict"] in ("tracks", "diverges", "stalls"):
            if len(loss["series"]) < 3 or loss["band"] != 1:
                errors.append(f"{s['name']}: loss chart has {len(loss['series'])} series, {loss['band']} bands")
            if not scale["series"] or not any(n > 1 for n in dev["series"]):
                errors.append(f"{s['name']}: scale / deviation not drawn")
        elif s["verdict"] == "error" and "raised at step" not in loss["note"]:
            errors.append(f"{s['name']}: error run's chart does not say so: {loss['note']!r}")
        elif s["verdict"] == "nonfinite" and "non-finite" not in loss["note"]:
            errors.append(f"{s['name']}: nonfinite run's chart does not say so: {loss['note']!r}")
        if s["skipped_steps"] and scale["ticks"] != s["skipped_steps"]:
            errors.append(f"{s['name']}: {scale['ticks']} skip ticks for {s['skipped_steps']} skipped steps")
    for kind in ("throughput", "memory"):
        if not dom.bars.get(kind, {}).get("bars"):
            errors.append(f"no {kind} bars in the strategy comparison")

    w, h, bpp, rows = read_png(sys.argv[3])

    def count(rgb, tol=10):
        n = 0
        for row in rows:
            for x in range(0, w * bpp, bpp):
                if abs(row[x] - rgb[0]) <= tol and abs(row[x + 1] - rgb[1]) <= tol and abs(row[x + 2] - rgb[2]) <= tol:
                    n += 1
        return n

    white = count((255, 255, 255), 2)
    run_blue = count((31, 119, 180), 12)       # run line, throughput bars
    band = count((209, 234, 209), 8)           # rgba(44,160,44,0.22) over white
    purple = count((148, 103, 189), 12)        # loss scale line, memory bars
    print(f"screenshot {w}x{h}: non-white {1 - white / (w * h):.1%}, run colour {run_blue} px, band {band} px, "
          f"scale/memory colour {purple} px")
    if white > 0.97 * w * h:
        errors.append("screenshot is (almost) blank")
    if run_blue < 200 or band < 200 or purple < 200:  # a blank or unstyled page has none of them
        errors.append("chart colours missing from the screenshot")
    if errors:
        print("FAIL:\n  " + "\n  ".join(errors))
        return 1
    print(f"report.html renders in Chromium: {len(names)} scenarios x 3 charts, comparison bars, pixels on screen")
    return 0


if __name__ == "__main__":
    sys.exit(main())
