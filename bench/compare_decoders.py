"""Decoder language models side by side: edgenn's Generator, onnxruntime's plain session
(the cache fed back as inputs, as its Python API runs a decoder) and onnxruntime-genai,
on the same onnxruntime-genai export, greedy, in interleaved rounds; and llama.cpp
(llama-cpp-python) when the folder also holds a GGUF of the same weights. Prints the
prefill time of a --prompt_tokens prompt and the median time per decoded token.

    python bench/compare_decoders.py smollm2-8l:int4 smollm2-8l:fp32 --threads 1

A name [shape:]precision is a decoder of tests/support/decoders.py (random weights, built
and exported on first use; shapes "small", the tests' Llama, and "smollm2-8l"); a folder
is any onnxruntime-genai export (model.onnx + genai_config.json). Beside either, a
model-*.gguf of the same weights adds llama.cpp: bench/decoder_gguf.py writes F32 beside
an fp32 export and pure Q4_0 (4-bit, block 32, the embedding / lm_head too, as an int4
export has them) beside an int4 one. (On an AMX CPU, llama-cpp-python built with
-march=native by GCC 12.2 crashes in a quantized prefill, its AMX tile config optimized
away (llama.cpp PR #26954); build it with -mno-amx-tile -mno-amx-int8 in CMAKE_C_FLAGS /
CMAKE_CXX_FLAGS.)
"""
import glob
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from edgenn.bench import run_record, script_args, write_record  # noqa: E402


def _folder(name: str) -> str:
    if os.path.isdir(name):
        return name
    from support.decoders import decoder
    shape, _, precision = name.rpartition(":")
    return str(decoder(precision, shape=shape or "small"))


def _prompt(folder: str, n: int) -> list[int]:
    with open(os.path.join(folder, "genai_config.json")) as f:
        vocab = json.load(f)["model"]["vocab_size"]
    return [int(t) for t in np.random.default_rng(0).integers(3, min(vocab, 2000), n)]


class Edgenn:
    name = "edgenn"

    def __init__(self, folder, threads):
        from edgenn.lm import Generator
        self.gen = Generator(folder, threads=threads, eos_token_ids=[])
        self.gen.generate([1, 2], 2)                   # the decode plan built
        self.gen.session.wait_tuned()

    def settle(self):
        """Wait for the background tuner to finish the plans the warm-up made (it times
        kernels in the session's idle time, which would otherwise overlap the rounds)."""
        self.gen.session.wait_tuned()

    def run(self, prompt, steps):
        t = [time.perf_counter()]
        for _ in self.gen.stream(prompt, steps):
            t.append(time.perf_counter())
        return t


class OnnxRuntime:
    name = "onnxruntime"

    def __init__(self, folder, threads):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        self.s = ort.InferenceSession(os.path.join(folder, "model.onnx"), so,
                                      providers=["CPUExecutionProvider"])
        self.pasts = [i for i in self.s.get_inputs() if i.name.startswith("past_key_values")]
        with open(os.path.join(folder, "genai_config.json")) as f:
            self.head = json.load(f)["model"]["decoder"]["head_size"]
        self.names = [o.name for o in self.s.get_outputs()]

    def run(self, prompt, steps):
        feed = {"input_ids": np.array([prompt], np.int64),
                "attention_mask": np.ones((1, len(prompt)), np.int64)}
        for p in self.pasts:
            feed[p.name] = np.zeros((1, p.shape[1], 0, self.head), np.float32)
        t = [time.perf_counter()]
        for k in range(steps):
            out = dict(zip(self.names, self.s.run(None, feed)))
            token = int(out["logits"][0, -1].argmax())
            t.append(time.perf_counter())
            feed = {"input_ids": np.array([[token]], np.int64),
                    "attention_mask": np.ones((1, len(prompt) + k + 1), np.int64)}
            for p in self.pasts:
                feed[p.name] = out[p.name.replace("past_key_values", "present")]
        return t


class Genai:
    name = "onnxruntime-genai"

    def __init__(self, folder, threads):
        import onnxruntime_genai as og
        self.og = og
        self.dir = tempfile.mkdtemp()               # the export with its thread count set
        for f in os.listdir(folder):
            os.symlink(os.path.join(folder, f), os.path.join(self.dir, f))
        with open(os.path.join(folder, "genai_config.json")) as f:
            config = json.load(f)
        config["model"]["decoder"]["session_options"]["intra_op_num_threads"] = threads
        os.remove(os.path.join(self.dir, "genai_config.json"))
        with open(os.path.join(self.dir, "genai_config.json"), "w") as f:
            json.dump(config, f)
        self.model = og.Model(self.dir)

    def run(self, prompt, steps):
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(max_length=len(prompt) + steps, do_sample=False,
                                  min_length=len(prompt) + steps)
        gen = self.og.Generator(self.model, params)
        t = [time.perf_counter()]
        gen.append_tokens(prompt)
        for _ in range(steps):
            gen.generate_next_token()
            gen.get_next_tokens()
            t.append(time.perf_counter())
        return t

    def __del__(self):
        shutil.rmtree(getattr(self, "dir", ""), ignore_errors=True)


class LlamaCpp:
    """llama.cpp through llama-cpp-python on the folder's model-*.gguf (the first by name):
    token ids in (no tokenizer), greedy as the onnxruntime runner is (argmax of the last
    position's logits), llama-cpp-python's defaults otherwise (f16 KV cache, flash
    attention off, the prompt in one batch)."""
    name = "llama.cpp"

    @staticmethod
    def available(folder) -> bool:
        """Whether the folder has a model-*.gguf and llama_cpp imports; if not, says so."""
        if not glob.glob(os.path.join(folder, "model-*.gguf")):
            print(f"llama.cpp: no model-*.gguf in {folder}, left out")
            return False
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            print("llama.cpp: llama_cpp (pip install llama-cpp-python) not importable, left out")
            return False
        return True

    def __init__(self, folder, threads):
        import llama_cpp
        self.lib = llama_cpp
        self.path = sorted(glob.glob(os.path.join(folder, "model-*.gguf")))[0]
        with open(os.path.join(folder, "genai_config.json")) as f:
            n_ctx = json.load(f)["model"]["context_length"]    # the export's own context
        self.llm = llama_cpp.Llama(self.path, n_ctx=n_ctx, n_threads=threads,
                                   n_threads_batch=threads, verbose=False)
        self.vocab = self.llm.n_vocab()

    def run(self, prompt, steps):
        # a fresh generation each round: no token counted as evaluated, the KV cache emptied
        self.llm.reset()
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.llm.ctx), True)
        t = [time.perf_counter()]
        tokens = prompt
        for _ in range(steps):
            self.llm.eval(tokens)                       # logits of the last position only
            logits = np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.llm.ctx, -1),
                                           shape=(self.vocab,))
            tokens = [int(logits.argmax())]
            t.append(time.perf_counter())
        return t


class Timed:
    """One runtime's times of one measure, as edgenn.bench.run_record reads a runner."""

    def __init__(self, name, times):
        self.name, self.times = name, times


def main():
    args = script_args(__doc__, prompt_tokens=64, new_tokens=64)
    args.rounds = min(args.rounds, 7)
    results = []
    for name in args.models:
        folder = _folder(name)
        prompt = _prompt(folder, args.prompt_tokens)
        runners = [cls(folder, args.threads) for cls in (Edgenn, OnnxRuntime, Genai)]
        if LlamaCpp.available(folder):
            runners.append(LlamaCpp(folder, args.threads))
            print(f"llama.cpp: {runners[-1].path}")
        prefill = {r.name: [] for r in runners}
        per_token = {r.name: [] for r in runners}
        for r in runners:          # warm-up: each runtime's plans / buffers for this prompt
            r.run(prompt, 2)
            getattr(r, "settle", lambda: None)()
        for _ in range(args.rounds):
            for r in runners:
                t = np.diff(r.run(prompt, args.new_tokens))
                prefill[r.name].append(t[0])
                per_token[r.name].extend(t[1:])
        print(f"\n== {name}: {args.prompt_tokens}-token prompt, {args.new_tokens} new "
              f"tokens, {args.threads} thread(s), {args.rounds} rounds")
        base = np.median(per_token["edgenn"])
        for r in runners:
            d = np.median(per_token[r.name])
            print(f"  {r.name:18s} prefill {np.median(prefill[r.name]) * 1e3:8.1f} ms   "
                  f"decode {d * 1e3:6.2f} ms/token ({1 / d:6.1f} tokens/s)   "
                  f"edgenn / this {base / d:.2f}")
        shapes = {"input_ids": (1, args.prompt_tokens)}
        label = os.path.basename(os.path.normpath(folder)) if os.path.isdir(name) else name
        results.append((f"{label} decode, ms per token", shapes,
                        [Timed(r.name, per_token[r.name]) for r in runners]))
        results.append((f"{label} prefill of {args.prompt_tokens} tokens", shapes,
                        [Timed(r.name, prefill[r.name]) for r in runners]))
    if args.json:
        record = run_record(args, results)
        try:                                   # run_record names the other runtimes' versions
            record["versions"]["llama-cpp-python"] = importlib.metadata.version(
                "llama_cpp_python")
        except importlib.metadata.PackageNotFoundError:
            pass
        write_record(args.json, record)


if __name__ == "__main__":
    main()
