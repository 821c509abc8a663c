"""Greedy generation against the runtimes users would otherwise use: transformers (torch)
on the float model, onnxruntime-genai on its own int4 export. Tokens agree until the two
runtimes' best logits are within float rounding of a tie, where either may be right."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime_genai as og

from edgenn.lm import Generator
from support.decoders import decoder, hf_folder

PROMPT = [5, 77, 301, 12, 900, 41, 3, 250]
STEPS = 64

# transformers' greedy generate in a child process (tests/ shadows the PyPI `kernels`
# package transformers imports), with each step's logits to judge near ties
_TORCH_GREEDY = """
import json, sys
import torch
from transformers import LlamaForCausalLM
model = LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32).eval()
prompt, steps = json.loads(sys.argv[2]), int(sys.argv[3])
with torch.no_grad():
    out = model.generate(torch.tensor([prompt]), max_new_tokens=steps, do_sample=False,
                         output_logits=True, return_dict_in_generate=True,
                         eos_token_id=None, pad_token_id=0)
tokens = out.sequences[0, len(prompt):].tolist()
gaps = [float(torch.topk(l[0], 2).values.diff().abs()) for l in out.logits]
print(json.dumps({"tokens": tokens, "gaps": gaps}))
"""


def _agree(mine: list[int], theirs: list[int], gaps: list[float], tol: float) -> None:
    """Identical, or identical up to a step where the peer's two best logits were within
    `tol` (a near tie float rounding may break either way)."""
    for t, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            assert gaps[t] <= tol, (t, a, b, gaps[t])
            return
    assert len(mine) == len(theirs) == STEPS


def test_fp32_greedy_matches_transformers():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", _TORCH_GREEDY, str(hf_folder("small")),
                        json.dumps(PROMPT), str(STEPS)], capture_output=True, text=True,
                       env=env, cwd=hf_folder("small").parent)
    assert r.returncode == 0, r.stderr[-3000:]
    torch_out = json.loads(r.stdout.strip().splitlines()[-1])
    mine = Generator(decoder("fp32"), eos_token_ids=[]).generate(PROMPT, STEPS)
    # float32 sums of a few hundred terms through two layers: far below 1e-3 of the
    # logits' size (which is O(1) here)
    _agree(mine, torch_out["tokens"], torch_out["gaps"], 1e-3)


def _exact_logits(folder, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """onnxruntime at accuracy_level 0 (the int4 weights dequantized, float activations)
    along the given tokens, the cache fed back: the logits both int8 runtimes approximate."""
    import onnx
    import onnxruntime as ort
    m = onnx.load(str(folder / "model.onnx"))
    for n in m.graph.node:
        for a in n.attribute:
            if a.name == "accuracy_level":
                a.i = 0
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    pasts = [i for i in s.get_inputs() if i.name.startswith("past_key_values")]
    feed = {"input_ids": np.array([prompt], np.int64),
            "attention_mask": np.ones((1, len(prompt)), np.int64)}
    feed.update({p.name: np.zeros((1, p.shape[1], 0, 16), np.float32) for p in pasts})
    out = []
    for t, token in enumerate(tokens):
        got = dict(zip(names, s.run(None, feed)))
        out.append(got["logits"][0, -1])
        feed = {"input_ids": np.array([[token]], np.int64),
                "attention_mask": np.ones((1, len(prompt) + t + 1), np.int64)}
        feed.update({p.name: got[p.name.replace("past_key_values", "present")]
                     for p in pasts})
    return out


def test_int4_greedy_matches_onnxruntime_genai():
    """The builder's int4 export at accuracy_level 4, along onnxruntime-genai's greedy
    tokens: both runtimes quantize the activations to int8 per block, each rounding its
    own way, so each lands near the exact logits (accuracy_level 0). Their choices may
    part only where the two best logits are closer than the two errors allow: a flip
    needs gap <= 2 (|mine - exact| + |theirs - exact|)."""
    from edgenn.lm.generator import _DecodeStep
    folder = decoder("int4")
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(PROMPT) + STEPS + 1, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(PROMPT)
    theirs, tokens = [], []
    for _ in range(STEPS):
        theirs.append(np.asarray(gen.get_logits()).reshape(-1).copy())
        tokens.append(int(theirs[-1].argmax()))
        gen.append_tokens([tokens[-1]])
    g = Generator(folder, eos_token_ids=[])
    cache = g._arrays(1, 256)
    mine = [g._prefill(0, np.array(PROMPT), cache, 256)]
    step = _DecodeStep(g, np.array([len(PROMPT)]), cache, 256)
    for token in tokens[:-1]:                  # teacher-forced along genai's tokens
        mine.append(step(np.array([token])).reshape(-1).copy())
    step.close()
    exact = _exact_logits(folder, PROMPT, tokens)
    for m, t, e in zip(mine, theirs, exact):
        if m.argmax() != t.argmax():
            top = np.sort(t)[-2:]
            assert top[1] - top[0] <= 2 * (np.abs(m - e).max() + np.abs(t - e).max())
    # and edgenn's int8 arithmetic strays from the exact logits no more than onnxruntime's
    # (by more than float rounding: a factor 2 of slack)
    assert max(np.abs(m - e).max() for m, e in zip(mine, exact)) <= \
        2 * max(np.abs(t - e).max() for t, e in zip(theirs, exact))
