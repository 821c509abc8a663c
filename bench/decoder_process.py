"""One process that loads a decoder and generates greedily, for whole-process figures (time
to the last token, peak memory) of one runtime at a time:

    /usr/bin/time -v python bench/decoder_process.py edgenn smollm2-8l:int4
    /usr/bin/time -v python bench/decoder_process.py onnxruntime-genai smollm2-8l:int4

Runtimes: edgenn, onnxruntime, onnxruntime-genai, llama.cpp (bench/compare_decoders.py's
runners, a 64-token prompt, --tokens greedy tokens).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import compare_decoders as cd  # noqa: E402

RUNNERS = {"edgenn": cd.Edgenn, "onnxruntime": cd.OnnxRuntime,
           "onnxruntime-genai": cd.Genai, "llama.cpp": cd.LlamaCpp}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("runtime", choices=sorted(RUNNERS))
    p.add_argument("model", help="shape:precision (tests/support/decoders.py) or a folder")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    folder = cd._folder(args.model)
    runner = RUNNERS[args.runtime](folder, args.threads)
    runner.run(cd._prompt(folder, 64), args.tokens)


if __name__ == "__main__":
    main()
