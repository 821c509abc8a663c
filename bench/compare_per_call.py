"""Per-call cost side by side: models so small that a call's time is the runtime's own
(binding inputs, walking the steps, a kernel call per node), edgenn against onnxruntime.
Each sample is the mean of --calls back-to-back calls; medians of --rounds interleaved
rounds, printed per call in microseconds; --json F writes the run record.
    python bench/compare_per_call.py chain1 chain10 chain50 digits:1 digits:16 silero_vad
Models: chainN (N elementwise nodes on a (1, 64) input), digits:B (the demo's digits CNN
at batch B), and any name of the test zoo (tests/support/models.py)."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.chains import chain_feeds, chain_model  # noqa: E402
from support.models import ZOO  # noqa: E402

from edgenn.bench import (edgenn_runner, interleave, onnxruntime_runner,  # noqa: E402
                          run_record, script_args, write_record)
from edgenn.demo import DEMO_MODEL  # noqa: E402

args = script_args(__doc__, calls=200)


def model(name: str, tmp: str):
    """-> (path, feeds) of a model named on the command line."""
    if name.startswith("chain"):
        path = os.path.join(tmp, f"{name}.onnx")
        with open(path, "wb") as f:
            f.write(chain_model(int(name[5:])).SerializeToString())
        return path, chain_feeds()
    if name.startswith("digits"):
        batch = int(name.partition(":")[2] or 1)
        x = np.random.default_rng(0).random((batch, 1, 8, 8), np.float32)
        return str(DEMO_MODEL), {"image": x}
    path, feeds = ZOO[name]()
    return str(path), feeds


def repeated(runner, calls: int):
    """The runner's run as `calls` calls in a row (a sample long enough to time)."""
    one = runner.run

    def run(feeds):
        for _ in range(calls):
            one(feeds)
    runner.run = run
    return runner


results = []
with tempfile.TemporaryDirectory() as tmp:
    for name in args.models:
        path, feeds = model(name, tmp)
        shapes = {k: v.shape for k, v in feeds.items()}
        runners = [edgenn_runner(path, args.threads, shapes),
                   onnxruntime_runner(path, args.threads, shapes)]
        ours, theirs = (r.run(feeds) for r in runners)
        for a, b in zip(ours, theirs):     # the same model: the same outputs
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        interleave([repeated(r, args.calls) for r in runners], feeds, args.rounds)
        for r in runners:
            r.times = [t / args.calls for t in r.times]
        us = {r.name: float(np.median(r.times)) * 1e6 for r in runners}
        print(f"{name:16} edgenn {us['edgenn']:8.2f} us   onnxruntime {us['onnxruntime']:8.2f}"
              f" us   ratio {us['edgenn'] / us['onnxruntime']:.2f}  ({args.threads} thread(s),"
              f" {args.rounds} rounds of {args.calls} calls)")
        results.append((name, shapes, runners))
if args.json:
    write_record(args.json, run_record(args, results))
