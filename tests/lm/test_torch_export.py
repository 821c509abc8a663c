"""A Llama-architecture decoder as torch.onnx writes it (standard ops: rotary as Sin / Cos
and Slice arithmetic, the cache a Concat per layer, the causal mask built from the
attention mask) runs in edgenn's session to onnxruntime's outputs, prompt then decode
steps with the cache fed back."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort

import edgenn
from support.decoders import CONFIG, torch_decoder


def test_prompt_then_decode_steps_match_onnxruntime():
    path = str(torch_decoder())
    mine = edgenn.InferenceSession(path)
    theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in theirs.get_outputs()]
    kv = CONFIG["num_key_value_heads"]
    head = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
    pasts = [i.name for i in theirs.get_inputs() if i.name.startswith("past_")]
    prompt = np.array([[5, 77, 301, 12, 900, 41]], np.int64)
    feed = {"input_ids": prompt, "attention_mask": np.ones((1, 6), np.int64)}
    feed.update({n: np.zeros((1, kv, 0, head), np.float32) for n in pasts})
    for step in range(3):
        got = dict(zip(names, mine.run(names, feed)))
        want = dict(zip(names, theirs.run(names, feed)))
        for n in names:           # float32 sums over a 96-wide model: a few ulps of them
            np.testing.assert_allclose(got[n], want[n], rtol=1e-4,
                                       atol=1e-5 * np.abs(want[n]).max(), err_msg=n)
        token = int(want["logits"][0, -1].argmax())
        total = feed["attention_mask"].shape[1] + 1
        feed = {"input_ids": np.array([[token]]),
                "attention_mask": np.ones((1, total), np.int64)}
        feed.update({n: want[n.replace("past", "present")] for n in pasts})


def test_the_generator_names_what_it_needs():
    import pytest
    from edgenn.errors import GraphError
    from edgenn.lm import Generator
    with pytest.raises(GraphError, match="onnxruntime-genai's model builder"):
        Generator(str(torch_decoder()))
