"""int8 side by side: edgenn fp32, edgenn int8 (its own quantizer), edgenn running
onnxruntime's QDQ model, onnxruntime fp32 and onnxruntime int8 (quantize_static, QDQ,
per-channel, u8/s8, after quant_pre_process), MNN fp32 and MNN int8 (its own post-training
quantizer, KL, through its Session API). Same 8 calibration images for all quantizers
(tests/support/models.py CALIBRATION_IMAGES); fidelity on the 8 held-out ones. Interleaved rounds,
medians. --no-mnn leaves MNN out.

    python bench/compare_int8.py --threads 1 mobilenet_v2-op13 resnet18-op17
"""
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.models import IMAGENET_MEAN, IMAGENET_STD, ZOO, imagenet_calibration  # noqa: E402

import edgenn  # noqa: E402
from edgenn.bench import (mnn_convert, cosine, edgenn_runner, interleave,  # noqa: E402
                          mnn_int8_model, mnn_session_runner, onnxruntime_int8_model,
                          onnxruntime_runner, script_args)


def main():
    args = script_args(__doc__, method="minmax", mnn=True)
    tmp = tempfile.mkdtemp(prefix="edgenn-int8-")
    for name in args.models:
        path, feeds = ZOO[name]()
        (input_name, x), = feeds.items()
        calib = [{input_name: b} for b in imagenet_calibration(x.shape[-1])]
        held = [{input_name: b} for b in imagenet_calibration(x.shape[-1], held_out=True)]
        t0 = time.perf_counter()
        ort_q = onnxruntime_int8_model(str(path), calib)
        t_ort_q = time.perf_counter() - t0
        t0 = time.perf_counter()
        ours = os.path.join(tmp, f"{name}.int8.enn")
        edgenn.save(edgenn.quantize(str(path), calib, method=args.method), ours)
        t_ours = time.perf_counter() - t0
        shapes = {input_name: x.shape}
        runners = [edgenn_runner(ours, args.threads, shapes),
                   edgenn_runner(str(path), args.threads, shapes),
                   edgenn_runner(ort_q, args.threads, shapes),
                   onnxruntime_runner(ort_q, args.threads),
                   onnxruntime_runner(str(path), args.threads)]
        labels = ["edgenn-int8", "edgenn-fp32", "edgenn(ORT-QDQ)", "ORT-int8", "ORT-fp32"]
        if args.mnn:
            mnn_q = mnn_int8_model(str(path), [b[input_name] for b in calib], IMAGENET_MEAN,
                                   IMAGENET_STD)
            runners += [mnn_session_runner(mnn_q, args.threads),
                        mnn_session_runner(mnn_convert(str(path), tempfile.mkdtemp()),
                                           args.threads)]
            labels += ["MNN-int8", "MNN-fp32"]
        for r, label in zip(runners, labels):
            r.name = label
        interleave(runners, feeds, args.rounds)
        base = float(np.median(runners[0].times))
        print(f"\n== {name} {tuple(x.shape)}  {args.threads} thread(s), {args.rounds} "
              f"interleaved rounds; quantize: edgenn {t_ours:.1f} s, ORT {t_ort_q:.1f} s")
        print(f"{'runtime':16} {'median ms':>10} {'min':>8} {'vs edgenn-int8':>15} "
              f"{'cos vs fp32':>12} {'top1 agree':>11}")
        ref = [runners[4].run(f)[0] for f in held]
        for r in runners:
            med = float(np.median(r.times))
            outs = [r.run(f)[0] for f in held]
            cos = np.mean([cosine(o, w) for o, w in zip(outs, ref)])
            agree = np.mean([o.argmax() == w.argmax() for o, w in zip(outs, ref)])
            print(f"{r.name:16} {med * 1e3:10.2f} {min(r.times) * 1e3:8.2f} "
                  f"{med / base:14.2f}x {cos:12.4f} {agree:11.2f}")
        fp = os.path.getsize(path)
        print(f"size: fp32 .onnx {fp / 1e6:.2f} MB, edgenn int8 .enn "
              f"{os.path.getsize(ours) / 1e6:.2f} MB ({os.path.getsize(ours) / fp:.3f}x), "
              f"ORT int8 .onnx {os.path.getsize(ort_q) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
