"""The generation loop: a decoder graph run token by token over a key / value cache kept
in place (cache.py), the next token chosen by sampling.py.

One Generator holds one session of the in-place graph. A call prefills each prompt on
its own (batch 1, over its row of the cache), then decodes the batch one token per step;
every decode step has the same input shapes (the cache's capacity, not its length), so
after the first step no plan is built. Entries that stop early keep running until the
batch ends; their tokens are not reported.
"""
from __future__ import annotations

import json
import os
from typing import Iterator

import numpy as np

from ..converters.source import load
from ..errors import ExecutionError, InputError
from ..extras import have, require
from ..graph.ir import Graph
from ..runtime.session import InferenceSession
from .cache import SEQLENS_INPUT, DecoderIO, bind_in_place, find_decoder_io
from .sampling import Sampling, pick

# cache capacity is rounded up to a multiple of this, so calls of similar lengths share
# their decode plan
CAPACITY_STEP = 256


class Generator:
    """Text or token generation with a decoder model.

    model: a .onnx / .enn path (a folder holding model.onnx also works) or a Graph. A
        genai_config.json beside the model supplies the head size, context length and
        end-of-sequence tokens; a tokenizer.json supplies the tokenizer (needs the
        `tokenizers` package: pip install 'edgenn[lm]').
    threads, tune: the session's (runtime/session.py).
    tokenizer: anything with encode(text).ids and decode(ids) (a tokenizers.Tokenizer).
    """

    def __init__(self, model, *, threads: int = 1, tune: str | None = None,
                 tokenizer=None, head_size: int | None = None,
                 context_length: int | None = None, eos_token_ids=None):
        path = _model_path(model)
        config = _genai_config(path)
        graph = model if isinstance(model, Graph) else load(path)
        self.io: DecoderIO = find_decoder_io(graph, head_size or config.get("head_size"))
        self.session = InferenceSession(bind_in_place(graph, self.io), threads=threads,
                                        tune=tune)
        self.context_length = context_length or config.get("context_length")
        eos = config.get("eos_token_id", []) if eos_token_ids is None else eos_token_ids
        self.eos_token_ids = {int(t) for t in np.atleast_1d(eos)}
        self.tokenizer = tokenizer if tokenizer is not None else _tokenizer(path)
        self._cache: dict[tuple, list[np.ndarray]] = {}

    # -- public ------------------------------------------------------------------------
    def generate(self, prompts, max_new_tokens: int = 64, sampling: Sampling | None = None,
                 stop_token_ids=None):
        """prompts: a text, a list of token ids, or a list of either (a batch). -> the new
        tokens of each prompt (lists of ids), or texts where the prompts were texts."""
        single = isinstance(prompts, str) or _is_ids(prompts)
        batch = [prompts] if single else list(prompts)
        if not batch:
            raise InputError("no prompt: give a text, a list of token ids, or a list of "
                             "either")
        ids = [self._encode(p) for p in batch]
        out = [[] for _ in ids]
        for step in self._steps(ids, max_new_tokens, sampling, stop_token_ids):
            for b, token in step.items():
                out[b].append(token)
        if isinstance(batch[0], str):
            out = [self.tokenizer.decode(t) for t in out]
        return out[0] if single else out

    def stream(self, prompt, max_new_tokens: int = 64, sampling: Sampling | None = None,
               stop_token_ids=None) -> Iterator:
        """One prompt's new tokens as they come: ids, or for a text prompt the text each
        token adds."""
        ids = self._encode(prompt)
        made: list[int] = []
        shown = text = ""
        for step in self._steps([ids], max_new_tokens, sampling, stop_token_ids):
            token = step[0]
            if not isinstance(prompt, str):
                yield token
                continue
            made.append(token)
            text = self.tokenizer.decode(made)
            if not text.endswith("\ufffd"):     # not in the middle of a character
                yield text[len(shown):]
                shown = text
        if len(text) > len(shown):              # the end, a character left incomplete
            yield text[len(shown):]

    # -- the loop ------------------------------------------------------------------------
    def _steps(self, prompts: list[np.ndarray], max_new_tokens: int,
               sampling: Sampling | None, stop_token_ids) -> Iterator[dict[int, int]]:
        """{batch entry: its next token} per step, for the entries still going."""
        if max_new_tokens < 1:
            return
        s = sampling or Sampling()
        rng = np.random.default_rng(s.seed)
        stop = self.eos_token_ids if stop_token_ids is None else \
            {int(t) for t in stop_token_ids}
        lengths = np.array([len(p) for p in prompts], np.int64)
        if lengths.min() < 1:
            raise InputError("a prompt needs at least one token")
        longest = int(lengths.max())
        if self.context_length and longest >= self.context_length:
            raise InputError(f"prompt of {longest} tokens: the model's context is "
                             f"{self.context_length}")
        if self.context_length:
            max_new_tokens = min(max_new_tokens, self.context_length - longest)
        cap = -(-(longest + max_new_tokens) // CAPACITY_STEP) * CAPACITY_STEP
        if self.context_length:
            cap = min(cap, self.context_length)
        cache = self._arrays(len(prompts), cap)
        logits = np.stack([self._prefill(b, p, cache, cap) for b, p in enumerate(prompts)])
        seen = [np.asarray(p, np.int64) for p in prompts]
        going = np.ones(len(prompts), bool)
        step = _DecodeStep(self, lengths, cache, cap)
        try:
            for k in range(max_new_tokens):
                tokens = pick(logits, seen, s, rng)
                yield {b: int(t) for b, t in enumerate(tokens) if going[b]}
                going &= ~np.isin(tokens, list(stop))
                if not going.any() or k == max_new_tokens - 1:
                    return
                seen = [np.append(h, t) for h, t in zip(seen, tokens)]
                logits = step(tokens)
        finally:
            step.close()

    def _prefill(self, b: int, prompt: np.ndarray, cache: list[np.ndarray],
                 cap: int) -> np.ndarray:
        n = len(prompt)
        rows = [a[b:b + 1] for a in cache]       # C-contiguous views: bound in place
        out = self._run(prompt[None, :], np.arange(n)[None, :], np.array([n]), rows, cap)
        if b == 0 and not any(np.any(a[0, :, :n]) for a in cache[:2]):
            raise ExecutionError("the key / value cache was not updated in place")
        return out[0, -1]

    def _feed(self, ids, positions, totals, cache: list[np.ndarray], cap: int) -> dict:
        io = self.io
        feed = {io.ids: np.ascontiguousarray(ids, np.int64),
                SEQLENS_INPUT: (totals - 1).astype(np.int32)}
        if io.mask:
            feed[io.mask] = (np.arange(cap)[None, :] < totals[:, None]).astype(np.int64)
        if io.positions:
            feed[io.positions] = np.ascontiguousarray(positions, np.int64)
        for slot, k, v in zip(io.slots, cache[0::2], cache[1::2]):
            feed[slot.key_input], feed[slot.value_input] = k, v
        return feed

    def _run(self, ids, positions, totals, cache: list[np.ndarray], cap: int) -> np.ndarray:
        return self.session.run([self.io.logits],
                                self._feed(ids, positions, totals, cache, cap))[0]

    def _arrays(self, batch: int, cap: int) -> list[np.ndarray]:
        """Zeroed key and value arrays of every layer (batch, kv_heads, cap, head_size),
        kept for the next call of the same size."""
        key = (batch, cap)
        arrays = self._cache.get(key)
        if arrays is None:
            self._cache.clear()
            shape = (batch, self.io.kv_heads, cap, self.io.head_size)
            arrays = [np.zeros(shape, self.io.dtype) for _ in range(2 * len(self.io.slots))]
            self._cache[key] = arrays
        else:
            for a in arrays:
                a.fill(0)
        return arrays

    def _encode(self, prompt) -> np.ndarray:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                require("tokenizers", "a text prompt")
                raise InputError("a text prompt needs a tokenizer (a tokenizer.json beside "
                                 "the model, or tokenizer=)")
            return np.asarray(self.tokenizer.encode(prompt).ids, np.int64)
        if not _is_ids(prompt):
            raise InputError("a prompt is a text or a list of token ids")
        return np.asarray(prompt, np.int64)


class _DecodeStep:
    """The decode steps of one batch: its inputs are arrays bound to the session once
    (runtime/session.py bind), each step writes the new tokens, positions and lengths into
    them and runs the plan; the logits come back as a view."""

    def __init__(self, gen: Generator, lengths: np.ndarray, cache: list[np.ndarray],
                 cap: int):
        self.lengths = lengths                   # tokens in the cache per entry
        feed = gen._feed(np.zeros((len(lengths), 1)), lengths[:, None], lengths, cache, cap)
        self.ids, self.seqlens = feed[gen.io.ids], feed[SEQLENS_INPUT]
        self.mask = feed.get(gen.io.mask)
        self.positions = feed.get(gen.io.positions)
        self.call = gen.session.bind([gen.io.logits], feed)

    def __call__(self, tokens: np.ndarray) -> np.ndarray:
        rows = np.arange(len(tokens))
        self.ids[:, 0] = tokens
        if self.mask is not None:
            self.mask[rows, self.lengths] = 1
        if self.positions is not None:
            self.positions[:, 0] = self.lengths
        self.seqlens[:] = self.lengths           # the valid length - 1, after this token
        self.lengths += 1
        return self.call()[0][:, -1]

    def close(self) -> None:
        self.call.close()


def generate(model, prompts, max_new_tokens: int = 64, sampling: Sampling | None = None,
             **options):
    """Generator(model, **options).generate(prompts, max_new_tokens, sampling)."""
    return Generator(model, **options).generate(prompts, max_new_tokens, sampling)


def _is_ids(x) -> bool:
    if isinstance(x, np.ndarray):
        return x.ndim == 1 and x.dtype.kind in "iu"
    return isinstance(x, (list, tuple)) and len(x) > 0 and \
        all(isinstance(t, (int, np.integer)) for t in x)


def _model_path(model) -> str | None:
    if isinstance(model, Graph):
        return None
    path = os.fspath(model)
    if os.path.isdir(path):
        path = os.path.join(path, "model.onnx")
    return path


def _genai_config(path: str | None) -> dict:
    """The decoder section of onnxruntime-genai's genai_config.json beside the model (plus
    its eos_token_id and context_length), or {}."""
    if path is None:
        return {}
    file = os.path.join(os.path.dirname(os.path.abspath(path)), "genai_config.json")
    try:
        with open(file, encoding="utf-8") as f:
            model = json.load(f).get("model", {})
    except (OSError, ValueError):
        return {}
    out = dict(model.get("decoder", {}))
    for k in ("eos_token_id", "context_length"):
        if k in model:
            out[k] = model[k]
    return out


def _tokenizer(path: str | None):
    """tokenizers.Tokenizer from the tokenizer.json beside the model, if both exist."""
    if path is None:
        return None
    file = os.path.join(os.path.dirname(os.path.abspath(path)), "tokenizer.json")
    if not os.path.exists(file) or not have("tokenizers"):
        return None
    from tokenizers import Tokenizer
    return Tokenizer.from_file(file)
