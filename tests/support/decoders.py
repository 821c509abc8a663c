"""Small decoder language models as users get them: a Llama-architecture Hugging Face
model with random weights (transformers, a fixed seed) and a byte-level BPE tokenizer
trained on Python's own sources, exported by onnxruntime-genai's model builder (fp32,
or int4 MatMulNBits weights), each in its own folder with genai_config.json and
tokenizer.json beside model.onnx, as the builder writes them.

Built once per source hash under the zoo's cache dir (support.models.default_cache_dir);
`decoder("int4")` -> the folder. `decoder("int4", shape="smollm2-8l")`: the width of
SmolLM2-135M (hidden 576, 9 query / 3 key-value heads, vocabulary 49152) with 8 layers,
the benchmarks' decoder (bench/compare_decoders.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from .models import default_cache_dir

# the Llama shape: grouped-query attention (3 query heads per key / value head),
# tied embeddings (the builder's GatherBlockQuantized on the int4 lm_head); weights drawn
# 10x wider than transformers' default, so that greedy decoding wanders over many tokens
# (at the default the random model repeats one token, which any runtime would match)
CONFIG = dict(vocab_size=1024, hidden_size=96, intermediate_size=256, num_hidden_layers=2,
              num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
              rope_theta=10000.0, tie_word_embeddings=True, rms_norm_eps=1e-5,
              initializer_range=0.2)
PRECISIONS = ("fp32", "int4")
SHAPES = {"small": CONFIG,
          "smollm2-8l": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                             num_hidden_layers=8, num_attention_heads=9,
                             num_key_value_heads=3, max_position_embeddings=2048,
                             rope_theta=10000.0, tie_word_embeddings=True,
                             rms_norm_eps=1e-5)}


def _hash() -> str:
    import onnxruntime_genai
    import transformers
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(f"{transformers.__version__} {onnxruntime_genai.__version__}".encode())
    return h.hexdigest()[:12]


# run in a child process: tests/ is on this process's path, and its `kernels` package
# shadows the PyPI one transformers imports
_HF_MODEL = """
import glob, json, os, sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
folder, config = sys.argv[1], json.loads(sys.argv[2])
torch.manual_seed(0)
LlamaForCausalLM(LlamaConfig(**config)).eval().save_pretrained(folder)
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
sources = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:40]
tok.train(sources, trainers.BpeTrainer(
    vocab_size=min(config["vocab_size"], 4096), special_tokens=["<|endoftext|>", "<|im_start|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>",
                        eos_token="<|endoftext|>").save_pretrained(folder)
"""


# the same architecture exported by torch.onnx (dynamo) with its cache as inputs and
# outputs in standard ops (Concat per layer): past_{i}_{key,value} -> present_{i}_*
_TORCH_EXPORT = """
import json, sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import DynamicCache
out, config = sys.argv[1], json.loads(sys.argv[2])
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(**config)).eval()
layers = config["num_hidden_layers"]
kv, head = config["num_key_value_heads"], config["hidden_size"] // config["num_attention_heads"]


class Decoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids, mask, *past):
        cache = DynamicCache()
        for i in range(layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        o = self.m(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        return (o.logits,) + tuple(t for layer in o.past_key_values.layers
                                   for t in (layer.keys, layer.values))


names = [f"past_{i}_{k}" for i in range(layers) for k in ("key", "value")]
past = [torch.randn(1, kv, 5, head) for _ in names]
dims = {"ids": {1: "S"}, "mask": {1: "T"}, "past": tuple({2: "P"} for _ in names)}
torch.onnx.export(Decoder(model), (torch.randint(0, 100, (1, 3)),
                  torch.ones(1, 8, dtype=torch.int64), *past), out, dynamo=True,
                  input_names=["input_ids", "attention_mask", *names],
                  output_names=["logits", *[n.replace("past", "present") for n in names]],
                  dynamic_shapes=dims)
"""


def _child(args: list[str], cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                       text=True)
    if r.returncode:
        raise RuntimeError(f"{args[0]} {args[1][:40]!r}... failed:\n{r.stderr[-3000:]}")


def torch_decoder(cache_dir=None) -> Path:
    """The CONFIG model as torch.onnx writes it (standard ops, the cache fed back)."""
    root = Path(cache_dir or default_cache_dir()) / f"decoders-{_hash()}"
    out = root / "torch" / "model.onnx"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        _child(["-c", _TORCH_EXPORT, str(out), json.dumps(CONFIG)], root)
    return out


def hf_folder(shape: str = "small", cache_dir=None) -> Path:
    """The Hugging Face folder (config, safetensors, tokenizer) of SHAPES[shape]."""
    root = Path(cache_dir or default_cache_dir()) / f"decoders-{_hash()}" / shape
    hf = root / "hf"
    root.mkdir(parents=True, exist_ok=True)
    if not (hf / "tokenizer.json").exists():
        _child(["-c", _HF_MODEL, str(hf), json.dumps(SHAPES[shape])], root)
    return hf


def decoder(precision: str, cache_dir=None, shape: str = "small") -> Path:
    """The folder of the builder's export of SHAPES[shape] at `precision` ("fp32" |
    "int4")."""
    assert precision in PRECISIONS
    hf = hf_folder(shape, cache_dir)
    root = hf.parent
    out = root / precision
    if (out / "model.onnx").exists():
        return out
    _child(["-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out), "-p",
            precision, "-e", "cpu", "-c", str(root / "tmp")], root)
    return out
