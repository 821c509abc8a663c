"""edgenn.Generator on onnxruntime-genai's exports of a small Llama (support/decoders.py),
against onnxruntime running the same file token by token with its cache fed back."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import edgenn
from edgenn.errors import EdgennError, InputError
from edgenn.lm import Generator, Sampling
from support.decoders import decoder
from support.helpers import make_model, run_cli


def _exact_int4(folder, tmp_path):
    """The int4 export with accuracy_level 0 (onnxruntime dequantizes the weights instead
    of quantizing the activations to int8), so both runtimes compute the same sums."""
    m = onnx.load(str(folder / "model.onnx"))
    for n in m.graph.node:
        for a in n.attribute:
            if a.name == "accuracy_level":
                a.i = 0
    out = tmp_path / "exact.onnx"
    onnx.save(m, str(out))
    return out


def _ort_greedy(path, prompt, steps):
    """onnxruntime's greedy tokens and each step's logits, the cache fed back as inputs."""
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    pasts = [i for i in s.get_inputs() if i.name.startswith("past_key_values")]
    feed = {"input_ids": np.array([prompt], np.int64),
            "attention_mask": np.ones((1, len(prompt)), np.int64)}
    for p in pasts:
        feed[p.name] = np.zeros((1, p.shape[1], 0, 16), np.float32)
    names = [o.name for o in s.get_outputs()]
    tokens, logits = [], []
    for t in range(steps):
        out = dict(zip(names, s.run(None, feed)))
        row = out["logits"][0, -1]
        logits.append(row)
        tokens.append(int(row.argmax()))
        feed = {"input_ids": np.array([[tokens[-1]]], np.int64),
                "attention_mask": np.ones((1, len(prompt) + t + 1), np.int64)}
        for p in pasts:
            feed[p.name] = out[p.name.replace("past_key_values", "present")]
    return tokens, logits


def _agree_until_near_tie(mine, theirs, logits, tol):
    """Greedy tokens agree at every step, or first differ where onnxruntime's two best
    logits are within `tol` (a near tie that float rounding may break either way)."""
    for t, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            top2 = np.sort(logits[t])[-2:]
            assert top2[1] - top2[0] <= tol, (t, a, b, top2)
            return t
    assert len(mine) == len(theirs)
    return len(mine)


def _tol(logits) -> float:
    # logits are sums over the hidden width of products of O(1) activations and weights
    # through a few layers: allow a float32 rounding budget relative to their scale
    return 1e-4 * float(np.abs(np.stack(logits)).max()) + 1e-5


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_greedy_tokens_match_onnxruntime(precision, tmp_path):
    folder = decoder(precision)
    path = folder / "model.onnx" if precision == "fp32" else _exact_int4(folder, tmp_path)
    prompt = [5, 77, 301, 12, 900, 41, 3]
    theirs, logits = _ort_greedy(path, prompt, 24)
    gen = Generator(path, context_length=512, eos_token_ids=[])
    mine = gen.generate(prompt, max_new_tokens=24)
    assert _agree_until_near_tie(mine, theirs, logits, _tol(logits)) >= 4


def test_batch_of_prompts_of_different_lengths_equals_each_alone():
    gen = Generator(decoder("fp32"), eos_token_ids=[])
    prompts = [[5, 6, 7], [100, 200, 300, 400, 500, 600], [42]]
    together = gen.generate(prompts, max_new_tokens=10)
    alone = [gen.generate(p, max_new_tokens=10) for p in prompts]
    assert together == alone


def test_decode_steps_reuse_one_plan():
    gen = Generator(decoder("int4"), eos_token_ids=[])
    gen.generate([1, 2, 3], max_new_tokens=3)
    plans = len(gen.session._plans)       # the prefill plan and the decode plan
    gen.generate([4, 5, 6], max_new_tokens=20)
    assert len(gen.session._plans) == plans


def test_stop_tokens_end_an_entry():
    gen = Generator(decoder("fp32"), eos_token_ids=[])
    free = gen.generate([9, 8, 7], max_new_tokens=12)
    stop = free[4]
    cut = gen.generate([9, 8, 7], max_new_tokens=12, stop_token_ids=[stop])
    assert cut == free[:free.index(stop) + 1]


def test_text_prompt_stream_and_generate_agree():
    gen = Generator(decoder("fp32"), eos_token_ids=[])
    assert gen.tokenizer is not None
    text = gen.generate("def main(argv):", max_new_tokens=16)
    assert isinstance(text, str)
    assert "".join(gen.stream("def main(argv):", max_new_tokens=16)) == text


def test_seeded_sampling_repeats_and_top_k_1_is_greedy():
    gen = Generator(decoder("fp32"), eos_token_ids=[])
    s = Sampling(temperature=1.0, top_k=50, top_p=0.9, seed=3)
    a = gen.generate([1, 2, 3], 12, s)
    assert a == gen.generate([1, 2, 3], 12, s)
    greedy = gen.generate([1, 2, 3], 12)
    assert gen.generate([1, 2, 3], 12, Sampling(temperature=0.7, top_k=1, seed=1)) == greedy


def test_bad_prompts_and_models_are_named_errors(tmp_path):
    gen = Generator(decoder("fp32"), eos_token_ids=[])
    with pytest.raises(InputError):
        gen.generate([], 4)
    with pytest.raises(InputError):
        gen.generate([1] * 600, 4)          # beyond the 512-token context
    with pytest.raises(InputError):
        gen.generate([[1.5, 2]], 4)
    plain = make_model([onnx.helper.make_node("Relu", ["x"], ["y"])],
                       [("x", np.float32, [1, 4])], [("y", np.float32, [1, 4])])
    with pytest.raises(EdgennError, match="not a decoder"):
        Generator(edgenn.load(plain.SerializeToString()))


def test_cli_generate_prints_tokens(capsys):
    folder = decoder("fp32")
    code, out, err = run_cli(capsys, "generate", str(folder), "--prompt", "import os",
                             "--max-new-tokens", "8")
    assert code == 0, err
    assert "tokens/s" in err and out.strip()
    code, out, err = run_cli(capsys, "generate", str(folder), "--prompt-ids", "1,2,x")
    assert code != 0 and "error" in err


def test_only_the_last_position_is_projected():
    """A prompt's logits come for its last position only (the next token's), equal to
    that row of the whole graph's logits."""
    path = decoder("fp32") / "model.onnx"
    gen = Generator(path, eos_token_ids=[])
    prompt = np.array([5, 6, 7, 8, 9], np.int64)
    cache = gen._arrays(1, 256)
    out = gen._run(prompt[None], np.arange(5)[None], np.array([5]), cache, 256)
    assert out.shape == (1, 1, 1024)
    whole = edgenn.InferenceSession(str(path))
    feed = {"input_ids": prompt[None], "attention_mask": np.ones((1, 5), np.int64)}
    for v in whole.get_inputs()[2:]:
        feed[v.name] = np.zeros((1, 2, 0, 16), np.float32)
    full = whole.run(["logits"], feed)[0]
    np.testing.assert_allclose(out[0, 0], full[0, -1], rtol=1e-5, atol=1e-5)
