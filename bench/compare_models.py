"""Interleaved side-by-side latency on zoo models: edgenn (reference kernels), edgenn
(current fast kernels), onnxruntime, MNN. Medians of --rounds, after warm-up; --json F
also writes them as a run record (tools/perf_pages.py: the docs' performance pages).
    python bench/compare_models.py --threads 1 mobilenet_v2-op13 resnet18-op17 ..."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.models import ZOO  # noqa: E402

from edgenn.bench import (PEERS, edgenn_runner, interleave, run_record,  # noqa: E402
                          script_args, table, write_record)

args = script_args(__doc__, peers="onnxruntime,mnn")   # prints the CPU and kernel tier
results = []
for name in args.models:
    path, feeds = ZOO[name]()
    shapes = {k: v.shape for k, v in feeds.items()}
    runners = [edgenn_runner(str(path), args.threads, shapes, reference=True),
               edgenn_runner(str(path), args.threads, shapes)]
    runners += [PEERS[peer](str(path), args.threads, shapes) for peer in args.peers.split(",")]
    interleave(runners, feeds, args.rounds)
    print(f"\n== {name} {[tuple(v.shape) for v in feeds.values()]}")
    print(table(runners[1:] + runners[:1], args.threads))
    results.append((name, shapes, runners[1:]))   # the reference kernels: not a result
if args.json:
    write_record(args.json, run_record(args, results))
