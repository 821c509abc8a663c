"""llama.cpp's files of a benchmark decoder (tests/support/decoders.py), so that
bench/compare_decoders.py times llama.cpp on the same weights: model-f32.gguf beside the
fp32 export and model-q4_0.gguf (pure Q4_0: every matrix 4-bit in blocks of 32, the tied
embedding / lm_head too, as the int4 export has them) beside the int4 one.

    python bench/decoder_gguf.py smollm2-8l --llama-cpp DIR

DIR: llama.cpp's sources (convert_hf_to_gguf.py and gguf-py; llama-cpp-python's sdist
holds them under vendor/llama.cpp); llama-cpp-python installed (its quantizer). The test
decoders' tokenizer is a byte-level BPE with GPT-2's split, trained here, whose hash the
converter does not know: it is named "gpt-2", which only affects llama.cpp's own text
tokenization (the benchmark feeds token ids).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from support.decoders import SHAPES, decoder, hf_folder  # noqa: E402

CONVERT = """
import runpy, sys
src = sys.argv.pop(1)
sys.path[:0] = [src, src + "/gguf-py"]
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv[0] = src + "/convert_hf_to_gguf.py"
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("shape", choices=sorted(SHAPES))
    p.add_argument("--llama-cpp", required=True, help="llama.cpp's source folder")
    args = p.parse_args()
    f32 = decoder("fp32", shape=args.shape) / "model-f32.gguf"
    q4 = decoder("int4", shape=args.shape) / "model-q4_0.gguf"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", CONVERT, args.llama_cpp,
                    str(hf_folder(args.shape)), "--outtype", "f32", "--outfile", str(f32)],
                   check=True, env=env)
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.pure = True
    rc = llama_cpp.llama_model_quantize(str(f32).encode(), str(q4).encode(), params)
    if rc:
        raise SystemExit(f"llama_model_quantize failed ({rc})")
    print(f"wrote {f32} and {q4}")


if __name__ == "__main__":
    main()
