"""The first plan's cost model (edgenn/runtime/costmodel.py): gather its samples on this
CPU, ship them, and measure how close the first plan comes to the tuned one.

    python tools/fit_cost_model.py --write          # tune the zoo, write costdata/<cpu>
    python tools/fit_cost_model.py --evaluate       # first plan vs tuned, per model

--write tunes every training model with tune="full" (each in an empty tuning cache of its
own, so each sample is known to come from one model) and writes the samples to
edgenn/runtime/costdata/<cpu>-<tier>-t<threads>.json. --evaluate builds, for each
evaluation model, the first plan from the shipped samples alone (no tuning cache) and
from the samples of the *other* architectures alone (leave one out: the model was never
measured), and the tuned plan, then times them interleaved in one process; it prints
the CPU, the tier and each plan's median, and the ratios first / tuned.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.models import ZOO, imagenet_calibration  # noqa: E402

import edgenn  # noqa: E402
from edgenn.kernels import isa  # noqa: E402
from edgenn.runtime import costmodel, tunecache  # noqa: E402
from edgenn.runtime import session as session_module  # noqa: E402
from edgenn.runtime.select import FIRST  # noqa: E402

TRAIN = ["mobilenet_v1-op11", "mobilenet_v2-op13", "mobilenet_v3_small-op13", "resnet18-op17",
         "resnet50-op17", "squeezenet1_1-op11", "shufflenet_v2-op11",
         "efficientnet_lite0-op13", "yolo_tiny-op18", "bert_tiny-op17", "minilm_l6-op17",
         "ppocr_v4_det", "ppocr_v4_rec", "crnn_bilstm-op14",
         "resnet18-op17:int8", "mobilenet_v2-op13:int8"]
EVALUATE = ["mobilenet_v2-op13", "resnet18-op17", "efficientnet_lite0-op13", "minilm_l6-op17",
            "resnet18-op17:int8", "mobilenet_v2-op13:int8"]


def architecture(name: str) -> str:
    """Variants of one network (opsets, int8) share layers: left out together."""
    return name.split("-")[0].split(":")[0]


def model(name: str, tmp: str):
    """-> (model path or .enn, feeds, input shapes)."""
    base, _, kind = name.partition(":")
    path, feeds = ZOO[base]()
    if kind == "int8":
        (input_name, x), = feeds.items()
        out = os.path.join(tmp, f"{base}.int8.enn")
        if not os.path.exists(out):
            calib = [{input_name: b} for b in imagenet_calibration(x.shape[-1])]
            edgenn.save(edgenn.quantize(str(path), calib), out)
        path = out
    return str(path), feeds, {k: v.shape for k, v in feeds.items()}


def samples_of_model(name: str, threads: int, tmp: str) -> list:
    """Tune `name` from an empty cache (tune="full"): -> its samples."""
    cache = tempfile.mkdtemp(dir=tmp)
    os.environ["EDGENN_CACHE_DIR"] = cache
    path, feeds, shapes = model(name, tmp)
    sess = edgenn.InferenceSession(path, threads=threads, tune="full", input_shapes=shapes)
    sess.run(None, feeds)
    return costmodel.samples_of(dict(tunecache.load(threads)))


def write(threads: int, tmp: str) -> None:
    per_model = {}
    for name in TRAIN:
        t0 = time.perf_counter()
        per_model[name] = samples_of_model(name, threads, tmp)
        print(f"  {name}: {len(per_model[name])} samples ({time.perf_counter() - t0:.1f} s)")
    out = costmodel.shipped_name(threads)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"cpu": isa.cpu_model(), "tier": isa.active_tier(), "threads": threads,
                   "features": list(costmodel.FEATURES),
                   "samples_by_model": {k: [list(s) for s in v]
                                        for k, v in per_model.items()},
                   "samples": [list(s) for v in per_model.values() for s in v]}, f)
    print(f"wrote {out}")


def evaluate(threads: int, rounds: int, tmp: str) -> None:
    with open(costmodel.shipped_name(threads)) as f:
        by_model = json.load(f)["samples_by_model"]
    tuned_cache = tempfile.mkdtemp(dir=tmp)
    empty_cache = tempfile.mkdtemp(dir=tmp)
    shipped = costmodel.shipped_samples
    print(f"first plan vs tuned plan, {threads} thread(s), {rounds} interleaved rounds, "
          f"medians; CPU: {isa.describe()}")
    print(f"  {'model':24} {'tuned':>9} {'first':>9} {'ratio':>6} {'leave-out':>10} "
          f"{'ratio':>6}")
    for name in EVALUATE:
        path, feeds, shapes = model(name, tmp)
        os.environ["EDGENN_CACHE_DIR"] = tuned_cache
        sess = edgenn.InferenceSession(path, threads=threads, tune="cached",
                                       input_shapes=shapes)
        tuned = sess.plan
        os.environ["EDGENN_CACHE_DIR"] = empty_cache     # the cost model alone
        costmodel._models.clear()
        first = sess._build(shapes, FIRST)
        others = [tuple(s) for k, v in by_model.items() if architecture(k) !=
                  architecture(name) for s in v]
        costmodel.shipped_samples = lambda t: others
        costmodel._models.clear()
        left_out = sess._build(shapes, FIRST)
        costmodel.shipped_samples = shipped
        costmodel._models.clear()
        plans = {"tuned": tuned, "first": first, "leave-out": left_out}
        names = [v.name for v in sess.graph.outputs]
        x = [feeds[v.name] for v in sess.graph.inputs]
        times = {k: [] for k in plans}
        for _ in range(rounds):
            for k, plan in plans.items():
                t0 = time.perf_counter()
                session_module._run(plan, threads, x, names)
                times[k].append(time.perf_counter() - t0)
        med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        print(f"  {name:24} {med['tuned']:7.2f}ms {med['first']:7.2f}ms "
              f"{med['first'] / med['tuned']:6.3f} {med['leave-out']:8.2f}ms "
              f"{med['leave-out'] / med['tuned']:6.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write", action="store_true")
    p.add_argument("--evaluate", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="edgenn-costmodel-")
    print(f"CPU: {isa.describe()}")
    if args.write:
        write(args.threads, tmp)
    if args.evaluate:
        evaluate(args.threads, args.rounds, tmp)


if __name__ == "__main__":
    main()
