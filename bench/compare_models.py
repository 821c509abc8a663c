"""Interleaved side-by-side latency on zoo models: edgenn (reference kernels), edgenn
(current fast kernels), onnxruntime, MNN. Medians of --rounds, after warm-up.
    python bench/compare_models.py --threads 1 mobilenet_v2-op13 resnet18-op17 ..."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.models import ZOO  # noqa: E402

from edgenn.bench import PEERS, edgenn_runner, interleave, script_args, table  # noqa: E402

args = script_args(__doc__, peers="onnxruntime,mnn")   # prints the CPU and kernel tier
for name in args.models:
    path, feeds = ZOO[name]()
    shapes = {k: v.shape for k, v in feeds.items()}
    runners = [edgenn_runner(str(path), args.threads, shapes, reference=True),
               edgenn_runner(str(path), args.threads, shapes)]
    runners += [PEERS[peer](str(path), args.threads, shapes) for peer in args.peers.split(",")]
    interleave(runners, feeds, args.rounds)
    print(f"\n== {name} {[tuple(v.shape) for v in feeds.values()]}")
    print(table(runners[1:] + runners[:1], args.threads))
