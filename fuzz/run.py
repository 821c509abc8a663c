"""Coverage-guided fuzzing of edgenn's front doors with atheris (libFuzzer for Python).

    python fuzz/run.py enn  [libFuzzer flags]    # .enn loader (bytes -> Graph -> plan)
    python fuzz/run.py onnx [libFuzzer flags]    # ONNX importer + passes + planner
    python fuzz/run.py onnxproto [flags]         # the ONNX reader alone (proto.py)
    python fuzz/run.py run  [libFuzzer flags]    # run() with random input shapes / dtypes
    python fuzz/run.py ennf [libFuzzer flags]    # .ennf family reader + members + probes

A finding is anything but success or an edgenn error (edgenn.EdgennError): another
exception, a crash, a timeout (-timeout) or memory past -rss_limit_mb. The seed corpus
(fuzz/seeds.py: the digits CNN and tiny graphs of the zoo's op families) is written to
fuzz/corpus/<target>/ on the first run; libFuzzer adds what it finds there. A long run:

    python fuzz/run.py onnx -runs=100000 -timeout=20 -rss_limit_mb=3000

(`--corpus=DIR` first: another corpus directory.)

CI runs each target for a bounded time (tests/project/test_fuzz.py).
"""
from __future__ import annotations

import os
import sys

import atheris

HERE = os.path.dirname(os.path.abspath(__file__))
NUMBA_MODULES = ["edgenn.kernels.rowops._transformer_jit", "edgenn.kernels.depthwise._window_jit",
                 "edgenn.kernels.tensor._upsample_jit"]   # numba compiles their bytecode

with atheris.instrument_imports(include=["edgenn"], exclude=NUMBA_MODULES):
    import numpy as np
    import edgenn
    from edgenn import api  # noqa: F401
    from edgenn.converters.onnx import importer  # noqa: F401
    from edgenn.converters.onnx import proto
    from edgenn.errors import EdgennError
    from edgenn.graph import format as enn  # noqa: F401
    from edgenn.oplist import load_kernels
    from edgenn.runtime import session  # noqa: F401
    from edgenn.graph import family as ennf
    from edgenn.scale.family import Family
    load_kernels()

sys.path.insert(0, HERE)
import seeds  # noqa: E402


def load_and_plan(data: bytes) -> None:
    try:
        sess = edgenn.InferenceSession(data, tune="off", max_memory=1 << 28)
        if sess.plan is not None:
            feeds = {a.name: np.zeros(a.shape, a.dtype) for a in sess.get_inputs()}
            sess.run(None, feeds)
    except EdgennError:
        pass


def read_onnx(data: bytes) -> None:
    """The reader alone, every lazy part forced: tensors decoded, attributes' values."""
    def graph(g):
        for t in g.initializer:
            t.array()
        for n in g.node:
            for a in n.attribute:
                if a.type in (proto.GRAPH, proto.GRAPHS):
                    for sub in ([a.g] if a.g else []) + a.graphs:
                        graph(sub)
                else:
                    a.value()
    try:
        graph(proto.parse(data).graph)
    except EdgennError:
        pass


_SESSIONS: list = []
DTYPES = ["float32", "float64", "int64", "int32", "uint8", "bool"]


def random_run(data: bytes) -> None:
    if not _SESSIONS:
        for m in seeds.tiny_models().values():
            _SESSIONS.append(edgenn.InferenceSession(m.SerializeToString(), tune="off"))
    fdp = atheris.FuzzedDataProvider(data)
    sess = _SESSIONS[fdp.ConsumeIntInRange(0, len(_SESSIONS) - 1)]
    feeds = {}
    for arg in sess.get_inputs():
        declared = list(arg.shape) if fdp.ConsumeIntInRange(0, 7) else []
        rank = len(arg.shape) if declared else fdp.ConsumeIntInRange(0, 5)
        # mostly the declared dims (so planning and kernels run), sometimes any size
        shape = [d if isinstance(d, int) and fdp.ConsumeIntInRange(0, 7)
                 else fdp.ConsumeIntInRange(0, 24) for d in (declared or [None] * rank)]
        dtype = DTYPES[0] if fdp.ConsumeBool() else fdp.PickValueInList(DTYPES)
        n = int(np.prod(shape))
        raw = fdp.ConsumeBytes(n * np.dtype(dtype).itemsize)
        x = np.zeros(n, dtype)
        x.view(np.uint8)[:len(raw)] = np.frombuffer(raw, np.uint8)
        if dtype == "bool":
            x = x.view(np.uint8).astype(bool)
        feeds[arg.name if fdp.ConsumeIntInRange(0, 15) else "wrong"] = x.reshape(shape)
    try:
        sess.run(None, feeds)
    except EdgennError:
        pass


def load_family(data: bytes) -> None:
    """A family file: read, every member decoded and checked, its probe layers cut out."""
    try:
        doc, blobs = ennf.read(data, "<fuzz>")
        Family(doc, blobs, "<fuzz>").probe_graphs()
    except EdgennError:
        pass


TARGETS = {"enn": load_and_plan, "onnx": load_and_plan, "onnxproto": read_onnx,
           "run": random_run, "ennf": load_family}


def main() -> None:
    target = sys.argv[1] if len(sys.argv) > 1 else ""
    if target not in TARGETS:
        sys.exit(f"usage: python fuzz/run.py {{{'|'.join(TARGETS)}}} [libFuzzer flags]")
    flags = sys.argv[2:]
    corpus = os.path.join(HERE, "corpus", target)
    if flags and flags[0].startswith("--corpus="):      # ours, not libFuzzer's
        corpus = flags.pop(0).split("=", 1)[1]
    if target != "run" and not os.path.isdir(corpus):
        seeds.write_corpus(corpus, target)
    os.makedirs(corpus, exist_ok=True)
    args = [sys.argv[0]] + flags + [corpus]
    atheris.Setup(args, TARGETS[target])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
