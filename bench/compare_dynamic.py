"""onnxruntime's quantize_dynamic models (the usual int8 recipe for transformers:
DynamicQuantizeLinear + MatMulInteger; ConvInteger for convs) side by side: edgenn and
onnxruntime running the same int8 model, and both running the fp32 model. 8-bit weights
(ORT's default) and 7-bit (reduce_range, ORT's advice for AVX2 without VNNI); edgenn's own
static quantizer (edgenn.quantize, minmax, 8 token batches or images of calibration) for
comparison. --preprocess: quant_pre_process first (folds BatchNormalization, as ORT's docs
advise). Interleaved rounds, medians; fidelity = cosine of the int8 output with the fp32
one (onnxruntime fp32).

    python bench/compare_dynamic.py --threads 1 minilm_l6-op17 bert_tiny-op17
    python bench/compare_dynamic.py --threads 1 --preprocess mobilenet_v2-op13
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.models import ZOO, imagenet_calibration  # noqa: E402
from support.quant_data import token_calibration  # noqa: E402

import edgenn  # noqa: E402
from edgenn.bench import (cosine, edgenn_runner, interleave,  # noqa: E402
                          onnxruntime_dynamic_model, onnxruntime_runner, script_args)


def main():
    args = script_args(__doc__, preprocess=False)
    for name in args.models:
        path, feeds = ZOO[name]()
        shapes = {k: v.shape for k, v in feeds.items()}
        dyn8 = onnxruntime_dynamic_model(str(path), preprocess=args.preprocess)
        dyn7 = onnxruntime_dynamic_model(str(path), reduce_range=True, preprocess=args.preprocess)
        own = os.path.join(os.path.dirname(dyn8), os.path.basename(dyn8) + ".own.enn")
        if "input_ids" in feeds:
            calib = token_calibration(feeds)
        else:
            (name_in, x), = feeds.items()
            calib = [{name_in: b} for b in imagenet_calibration(x.shape[-1])]
        edgenn.save(edgenn.quantize(str(path), calib), own)
        runners = [edgenn_runner(dyn8, args.threads, shapes),
                   onnxruntime_runner(dyn8, args.threads),
                   edgenn_runner(dyn7, args.threads, shapes),
                   onnxruntime_runner(dyn7, args.threads),
                   edgenn_runner(own, args.threads, shapes),
                   edgenn_runner(str(path), args.threads, shapes),
                   onnxruntime_runner(str(path), args.threads)]
        for r, label in zip(runners, ("edgenn-int8", "ORT-int8", "edgenn-int8/7b", "ORT-int8/7b",
                                      "edgenn-own-int8", "edgenn-fp32", "ORT-fp32")):
            r.name = label
        interleave(runners, feeds, args.rounds)
        ref = runners[-1].run(feeds)[0]
        base = float(np.median(runners[0].times))
        print(f"\n== {name} {shapes}  {args.threads} thread(s), {args.rounds} interleaved "
              f"rounds; int8 = onnxruntime quantize_dynamic (s8 weights; /7b: reduce_range)")
        print(f"{'runtime':16} {'median ms':>10} {'min':>8} {'vs edgenn-int8':>15} "
              f"{'cos vs fp32':>12}")
        for r in runners:
            med = float(np.median(r.times))
            cos = cosine(r.run(feeds)[0], ref)
            print(f"{r.name:16} {med * 1e3:10.2f} {min(r.times) * 1e3:8.2f} "
                  f"{med / base:14.2f}x {cos:12.6f}")


if __name__ == "__main__":
    main()
