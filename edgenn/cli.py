"""The `edgenn` command.

Exit codes: 0 success; 1 `check` found outputs outside tolerance; 2 bad command line;
3 the model or the inputs were rejected (corrupt file, unsupported op, wrong input);
4 an internal error (a bug: rerun with EDGENN_DEBUG=1 for the traceback).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_REJECTED, EXIT_INTERNAL = 0, 1, 2, 3, 4


def _parse_shapes(items) -> dict:
    shapes = {}
    for item in items or []:
        name, _, dims = item.partition("=")
        if not dims:
            raise SystemExit(f"edgenn: --shape wants NAME=D1,D2,...; got {item!r}")
        shapes[name] = tuple(int(d) for d in dims.replace("x", ",").split(","))
    return shapes


def _parse_inputs(items) -> dict:
    import numpy as np
    feeds = {}
    for item in items or []:
        name, _, path = item.partition("=")
        if not path:
            raise SystemExit(f"edgenn: --input wants NAME=FILE.npy; got {item!r}")
        feeds[name] = np.load(path, allow_pickle=False)
    return feeds


def cmd_convert(args) -> int:
    from .api import convert
    t0 = time.perf_counter()
    graph = convert(args.model, args.output)
    size = os.path.getsize(args.output)
    print(f"wrote {args.output}: {len(graph.nodes)} nodes, {size / 1e6:.2f} MB "
          f"({time.perf_counter() - t0:.2f} s)")
    return EXIT_OK


def cmd_run(args) -> int:
    import numpy as np
    from .runtime.session import InferenceSession
    from .tools import progress_printer, random_feeds
    sess = InferenceSession(args.model, threads=args.threads, tune=args.tune,
                            input_shapes=_parse_shapes(args.shape) or None,
                            progress=progress_printer())
    feeds = _parse_inputs(args.input) or random_feeds(sess, _parse_shapes(args.shape))
    t0 = time.perf_counter()
    outputs = sess.run(None, feeds)
    dt = time.perf_counter() - t0
    for arg, y in zip(sess.get_outputs(), outputs):
        if args.output_dir:
            os.makedirs(args.output_dir, exist_ok=True)
            path = os.path.join(args.output_dir, f"{_safe(arg.name)}.npy")
            np.save(path, y)
            print(f"{arg.name}: {y.dtype}{list(y.shape)} -> {path}")
        else:
            print(f"{arg.name}: {y.dtype}{list(y.shape)}")
            print(np.array2string(y, threshold=20, precision=5))
    print(f"run: {dt * 1e3:.2f} ms (first run, {args.threads} thread(s))")
    return EXIT_OK


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def cmd_inspect(args) -> int:
    from .tools import describe, describe_plan, progress_printer
    print(describe(args.model))
    if args.plan:
        from .runtime.session import InferenceSession
        sess = InferenceSession(args.model, threads=args.threads, tune=args.tune,
                                input_shapes=_parse_shapes(args.shape) or None,
                                progress=progress_printer())
        print(describe_plan(sess))
    return EXIT_OK


def cmd_check(args) -> int:
    from .tools import check
    report, worst = check(args.model, _parse_inputs(args.input), _parse_shapes(args.shape),
                          threads=args.threads)
    print(report)
    ok = worst <= args.tolerance
    print(f"{'OK' if ok else 'MISMATCH'}: max relative error {worst:.3g} "
          f"(tolerance {args.tolerance:g})")
    return EXIT_OK if ok else EXIT_MISMATCH


def cmd_bench(args) -> int:
    from .bench import compare, table
    from .runtime.session import InferenceSession
    from .tools import random_feeds
    shapes = _parse_shapes(args.shape)
    feeds = _parse_inputs(args.input) or random_feeds(
        InferenceSession(args.model, input_shapes=shapes or None), shapes)
    peers = [p for p in (args.compare or "").split(",") if p]
    runners = compare(args.model, feeds, args.threads, peers, rounds=args.rounds,
                      shapes=shapes, reference=args.reference)
    print(table(runners, args.threads))
    return EXIT_OK


def cmd_demo(args) -> int:
    from .demo import main as demo
    return demo(threads=args.threads)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="edgenn", description=__doc__.splitlines()[0],
                                epilog="exit codes: 0 ok, 1 check mismatch, 2 usage, "
                                       "3 model/input rejected, 4 internal error")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("convert", help="ONNX -> optimized .enn")
    c.add_argument("model")
    c.add_argument("-o", "--output", required=True)
    c.set_defaults(fn=cmd_convert)

    def model_cmd(name, help_, fn):
        s = sub.add_parser(name, help=help_)
        s.add_argument("model", help=".onnx or .enn")
        s.add_argument("--threads", type=int, default=1)
        s.add_argument("--shape", action="append", metavar="NAME=D1,D2,..",
                       help="bind an input's dynamic dims")
        s.add_argument("--input", action="append", metavar="NAME=FILE.npy")
        s.add_argument("--tune", choices=("off", "cached", "full"), default=None,
                       help="kernel choice at load: off (no timing), cached (default), "
                            "full (retime); or EDGENN_TUNE")
        s.set_defaults(fn=fn)
        return s

    r = model_cmd("run", "run a model on given (or random) inputs", cmd_run)
    r.add_argument("--output-dir", help="save outputs as .npy here instead of printing")
    k = model_cmd("check", "compare edgenn with onnxruntime on the same inputs", cmd_check)
    k.add_argument("--tolerance", type=float, default=1e-4,
                   help="max relative error max|a-b|/max|b| (default 1e-4)")
    b = model_cmd("bench", "latency side by side with onnxruntime / MNN", cmd_bench)
    b.add_argument("--compare", default="onnxruntime", help="comma list: onnxruntime,mnn")
    b.add_argument("--rounds", type=int, default=20)
    b.add_argument("--reference", action="store_true", help="time the reference kernels")
    i = model_cmd("inspect", "ops, parameters, sizes, fusions; --plan: kernels chosen",
                  cmd_inspect)
    i.add_argument("--plan", action="store_true",
                   help="also build the plan: per layer the candidates, times and choice")
    d = sub.add_parser("demo", help="convert, check and run the embedded default model")
    d.add_argument("--threads", type=int, default=1)
    d.set_defaults(fn=cmd_demo)
    return p


def main(argv=None) -> int:
    from .errors import EdgennError
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except EdgennError as exc:
        print(f"edgenn: error: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    except (OSError, ValueError) as exc:  # unreadable files, malformed .npy, bad numbers
        print(f"edgenn: error: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug; never a raw traceback by default
        if os.environ.get("EDGENN_DEBUG"):
            raise
        print(f"edgenn: internal error: {type(exc).__name__}: {exc}\n"
              f"(a bug in edgenn; rerun with EDGENN_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
