"""Two builds of edgenn on whole models with one plan: their outputs bit for bit, and the
instructions each executes per inference (callgrind; wall-clock A/B between processes is
too noisy on shared machines to show a 1% change, instruction counts are not).

    python tools/ab_builds.py prepare                       # model files (this tree)
    python tools/ab_builds.py bits /path/to/other/tree       # outputs, same plan
    python tools/ab_builds.py instructions /path/to/other/tree [--runs 3]
    ... [--models mobilenet_v2-op13,resnet18-op17-int8]      # a subset

The other tree is a checkout built in place (`git worktree add /tmp/before REV && cd
/tmp/before && python setup.py build_ext --inplace`). One plan: both builds read one tuning
cache (this tree tunes it; it is copied under the other build's digest) and plan-time
fusion, decided by timing in every session, is fixed to "fuse where a kernel exists".
Work files live in $AB_DIR (default /tmp/edgenn-ab). instructions needs valgrind.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.environ.get("AB_DIR", "/tmp/edgenn-ab")
FP32 = ["mobilenet_v2-op13", "resnet18-op17", "efficientnet_lite0-op13", "minilm_l6-op17"]
INT8 = ["mobilenet_v2-op13", "resnet18-op17"]


def _env(tree: str | None) -> dict:
    env = dict(os.environ, EDGENN_CACHE_DIR=os.path.join(WORK, "cache"))
    if tree:
        env["PYTHONPATH"] = tree
    return env


def prepare():
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import edgenn
    from support.models import ZOO, imagenet_calibration
    os.makedirs(WORK, exist_ok=True)
    index = {}
    for name in FP32:
        path, feeds = ZOO[name]()
        np.savez(os.path.join(WORK, f"{name}.feeds.npz"), **feeds)
        index[name] = str(path)
    for name in INT8:
        path, feeds = ZOO[name]()
        (iname, x), = feeds.items()
        calib = [{iname: b} for b in imagenet_calibration(x.shape[-1])]
        out = os.path.join(WORK, f"{name}.int8.enn")
        edgenn.save(edgenn.quantize(str(path), calib), out)
        np.savez(os.path.join(WORK, f"{name}-int8.feeds.npz"), **feeds)
        index[name + "-int8"] = out
    json.dump(index, open(os.path.join(WORK, "index.json"), "w"))


def _session(name: str):
    """(session, feeds) of a prepared model in this process's edgenn, one fixed plan."""
    import edgenn
    from edgenn.runtime import fuse_steps
    fuse_steps.fusion_pays = lambda first, second, fused: fused.kernel != "reference"
    index = json.load(open(os.path.join(WORK, "index.json")))
    feeds = dict(np.load(os.path.join(WORK, f"{name}.feeds.npz")))
    return edgenn.InferenceSession(index[name], threads=1, tune="cached"), feeds


def _child(args):
    """In a child process (the build under test on sys.path): outputs or the k runs."""
    sess, feeds = _session(args.model)
    if args.child == "outputs":
        np.savez(args.out, *sess.run(None, feeds))
        return
    sess.run(None, feeds)
    tag = args.out
    open(tag + ".ready", "w").close()
    while not os.path.exists(tag + ".go"):
        time.sleep(0.05)
    for _ in range(args.runs):
        sess.run(None, feeds)
    open(tag + ".done", "w").close()
    while not os.path.exists(tag + ".exit"):
        time.sleep(0.05)


def _share_cache(other: str):
    """This build's tuning cache copied under the other build's digest (tuned first)."""
    def path(tree):
        code = "from edgenn.runtime import tunecache; print(tunecache._path(1))"
        return subprocess.run([sys.executable, "-c", code], env=_env(tree), cwd=WORK,
                              capture_output=True, text=True, check=True).stdout.strip()
    index = json.load(open(os.path.join(WORK, "index.json")))
    for name in index:     # tune every model once on this build
        _run_child("outputs", name, None, os.path.join(WORK, "warm.npz"))
    mine, theirs = path(None), path(other)
    if mine != theirs:
        shutil.copyfile(mine, theirs)


def _run_child(kind, model, tree, out):
    subprocess.run([sys.executable, os.path.abspath(__file__), "child", kind, model, out],
                   env=_env(tree), cwd=WORK, check=True)


def _models(only: str | None) -> list:
    index = json.load(open(os.path.join(WORK, "index.json")))
    return [m for m in index if not only or m in only.split(",")]


def bits(other: str, only: str | None):
    _share_cache(other)
    for name in _models(only):
        outs = []
        for label, tree in (("this", None), ("other", other)):
            out = os.path.join(WORK, f"out.{label}.{name}.npz")
            _run_child("outputs", name, tree, out)
            outs.append(np.load(out))
        same = all(np.array_equal(outs[0][k], outs[1][k]) for k in outs[0].files)
        print(f"{name:28} bit-identical {same}")


def _instructions(name, tree, label, runs) -> int:
    tag = os.path.join(WORK, f"ir.{label}.{name}")
    for ext in (".ready", ".go", ".done", ".exit", ".log"):
        if os.path.exists(tag + ext):
            os.remove(tag + ext)
    real = os.path.realpath(sys.executable)
    wrap = ("valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={tag}.out", f"--log-file={tag}.log")
    cmd = [*wrap, real, os.path.abspath(__file__), "child", "runs", name, tag, "--runs",
           str(runs)]
    proc = subprocess.Popen(cmd, env=_env(tree), cwd=WORK)
    while not os.path.exists(tag + ".ready"):
        time.sleep(0.5)
    subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], capture_output=True)
    open(tag + ".go", "w").close()
    while not os.path.exists(tag + ".done"):
        time.sleep(0.5)
    subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], capture_output=True)
    open(tag + ".exit", "w").close()
    proc.wait()
    log = open(tag + ".log").read()
    return int(log.split("Collected :")[1].split()[0]) // runs


def instructions(other: str, runs: int, only: str | None):
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind not found (Debian: apt-get install valgrind)")
    _share_cache(other)
    for name in _models(only):
        a = _instructions(name, None, "this", runs)
        b = _instructions(name, other, "other", runs)
        print(f"{name:28} this {a:>13,} other {b:>13,} instructions per inference "
              f"({(a / b - 1) * 100:+.3f}%)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=["prepare", "bits", "instructions", "child"])
    ap.add_argument("rest", nargs="*")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--models", help="a comma-separated subset of the prepared models")
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare()
    elif args.cmd == "child":
        args.child, args.model, args.out = args.rest
        _child(args)
    elif args.cmd == "bits":
        bits(os.path.abspath(args.rest[0]), args.models)
    else:
        instructions(os.path.abspath(args.rest[0]), args.runs, args.models)


if __name__ == "__main__":
    main()
