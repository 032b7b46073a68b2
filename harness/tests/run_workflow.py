#!/usr/bin/env python3
"""Runs the `run:` steps of a GitHub Actions job locally, in order, the way a runner does, to test a workflow recipe.

    run_workflow.py WORKFLOW.yml JOB --workdir DIR [--skip STEP_ID...] [--env KEY=VALUE...]

Each step runs with `bash -e {0}` in DIR with the job's env, what earlier steps appended to $GITHUB_ENV, and its own
$GITHUB_OUTPUT / $GITHUB_STEP_SUMMARY files. `if:` conditions are evaluated for the expressions recipes use:
always(), success(), failure(), steps.<id>.outcome / .outputs.<name>, env.<name>, string literals, ==, !=, &&, ||, !.
`uses:` steps are not run; they are reported with whether their condition held (e.g. that the artifact upload would
run). Prints one JSON object: {"steps": [{"name", "id", "ran", "outcome", "uses"}], "summary": "...", "failed": bool}.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml


def evaluate(expr, ctx):
    expr = expr.strip()
    if expr.startswith("${{") and expr.endswith("}}"):
        expr = expr[3:-2].strip()
    tokens = re.findall(r"'[^']*'|&&|\|\||==|!=|!|\(|\)|[A-Za-z_][\w.\-]*(?:\(\))?", expr)
    if "".join(tokens).replace(" ", "") != expr.replace(" ", ""):
        raise ValueError(f"unsupported expression: {expr}")
    out = []
    for t in tokens:
        if t.startswith("'"):
            out.append(repr(t[1:-1]))
        elif t in ("&&", "||", "!"):
            out.append({"&&": " and ", "||": " or ", "!": " not "}[t])
        elif t in ("==", "!=", "(", ")"):
            out.append(f" {t} ")
        elif t == "always()":
            out.append("True")
        elif t == "success()":
            out.append(repr(not ctx["failed"]))
        elif t == "failure()":
            out.append(repr(ctx["failed"]))
        elif t.startswith("steps."):
            parts = t.split(".")
            step = ctx["steps"].get(parts[1], {})
            value = step.get("outputs", {}).get(parts[3], "") if parts[2] == "outputs" else step.get(parts[2], "")
            out.append(repr(value))
        elif t.startswith("env."):
            out.append(repr(ctx["env"].get(t[4:], "")))
        else:
            raise ValueError(f"unsupported token {t!r} in {expr}")
    return bool(eval("".join(out), {"__builtins__": {}}))


def read_kv(path):
    out = {}
    if os.path.exists(path):
        for line in open(path):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                out[k] = v
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workflow")
    ap.add_argument("job")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--skip", nargs="*", default=[])
    ap.add_argument("--env", nargs="*", default=[])
    a = ap.parse_args()
    wf = yaml.safe_load(open(a.workflow))
    job = wf["jobs"][a.job]
    env = dict(os.environ)
    env.update({k: str(v) for k, v in (wf.get("env") or {}).items()})
    env.update({k: str(v) for k, v in (job.get("env") or {}).items()})
    env.update(dict(kv.split("=", 1) for kv in a.env))
    tmp = tempfile.mkdtemp()
    summary_path = os.path.join(tmp, "summary.md")
    open(summary_path, "w").close()
    ctx = {"steps": {}, "env": env, "failed": False}
    results = []
    for i, step in enumerate(job["steps"]):
        sid = step.get("id", f"step{i}")
        cond = step.get("if", "success()")
        run = evaluate(str(cond), ctx) if sid not in a.skip else False
        result = {"name": step.get("name", step.get("uses", sid)), "id": sid, "ran": False, "would_run": run,
                  "outcome": "skipped", "uses": step.get("uses")}
        if run and "run" in step:
            env_file, out_file = os.path.join(tmp, f"env{i}"), os.path.join(tmp, f"out{i}")
            open(env_file, "w").close()
            open(out_file, "w").close()
            step_env = dict(env)
            step_env.update({k: str(v) for k, v in (step.get("env") or {}).items()})
            step_env.update(GITHUB_ENV=env_file, GITHUB_OUTPUT=out_file, GITHUB_STEP_SUMMARY=summary_path)
            p = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=a.workdir, env=step_env, stdout=sys.stderr)
            result.update(ran=True, outcome="success" if p.returncode == 0 else "failure")
            env.update(read_kv(env_file))
            ctx["steps"][sid] = {"outcome": result["outcome"], "outputs": read_kv(out_file)}
            if p.returncode != 0:
                ctx["failed"] = True
        else:
            ctx["steps"][sid] = {"outcome": "skipped" if not run else "success", "outputs": {}}
        results.append(result)
    print(json.dumps({"steps": results, "summary": open(summary_path).read(), "failed": ctx["failed"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
