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
    from .api import convert, load, save
    t0 = time.perf_counter()
    graph = convert(args.model)
    coded = ""
    if (args.calib or args.block) and args.weights == "fp32":
        from .errors import InputError
        raise InputError("--calib / --block choose weight codes: give --weights int8|int4")
    if args.weights != "fp32":
        from .compress.weights import compress_weights
        rep = compress_weights(graph, 8 if args.weights == "int8" else 4, block=args.block,
                               calib=args.calib, threads=args.threads)
        how = f", {rep['gptq']} by GPTQ on the calibration data" if args.calib else ""
        coded = (f", {rep['tensors']} weights as {args.weights}{how} "
                 f"({rep['bytes_before'] / 1e6:.2f} -> {rep['bytes_after'] / 1e6:.2f} MB)")
    save(graph, args.output, encrypt=args.encrypt, entropy=args.entropy or None)
    if args.entropy:   # from the file written: its frames, not a second coding
        coded = coded + _entropy_summary(load(args.output))
    size = os.path.getsize(args.output)
    sealed = ", sealed (AES-256-GCM)" if args.encrypt else ""
    print(f"wrote {args.output}: {len(graph.nodes)} nodes, {size / 1e6:.2f} MB{coded}{sealed} "
          f"({time.perf_counter() - t0:.2f} s)")
    return EXIT_OK


def _entropy_summary(graph) -> str:
    from .compress.entropy_report import entropy_report
    rep = entropy_report(graph)
    return (f", int8/int4 weights zstd-coded: {rep.coded_bits / max(rep.symbols, 1):.2f} bits "
            f"per weight (entropy {rep.entropy_bits / max(rep.symbols, 1):.2f})")


def cmd_run(args) -> int:
    import numpy as np
    from .api import InferenceSession
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


def cmd_tune(args) -> int:
    import json
    from .errors import InputError
    from .runtime import tunecache
    if args.import_file:
        with open(args.import_file) as f:
            added = tunecache.import_bundle(json.load(f))
        print(f"{added} tuning entries added to {tunecache.cache_dir()}")
    if args.model:
        from .api import InferenceSession
        from .tools import progress_printer
        t0 = time.perf_counter()
        sess = InferenceSession(args.model, threads=args.threads,
                                tune="full" if args.full else "cached",
                                input_shapes=_parse_shapes(args.shape) or None,
                                progress=progress_printer())
        if sess.plan is None:
            raise InputError("the model has dynamic input dims: bind them with --shape")
        timed = sum(1 for st in sess.plan.steps if st.choice.times)
        print(f"tuned {args.model} ({args.threads} thread(s)): {timed} of "
              f"{len(sess.plan.steps)} steps timed or cached, {time.perf_counter() - t0:.1f} s;"
              f" cache {tunecache.cache_dir()}")
    elif not args.import_file:
        raise InputError("edgenn tune: give a model to tune, or --import FILE")
    if args.export:
        bundle = tunecache.export_bundle()
        with open(args.export, "w") as f:
            json.dump(bundle, f)
        print(f"{sum(len(e) for e in bundle['entries'].values())} entries -> {args.export}")
    return EXIT_OK


def _quantize_weights(args, t0: float) -> int:
    from .api import load, save
    from .compress.nbits import quantize_matmuls
    graph = load(args.model)
    done = quantize_matmuls(graph, bits=int(args.weights[3:]), block=args.block, fit=args.fit)
    save(graph, args.output, entropy=args.entropy or None)
    print(f"wrote {args.output}: {done['layers']} MatMulNBits layers, {done['tables']} "
          f"embedding tables, weights "
          f"{done['bytes_before'] / 1e6:.1f} -> {done['bytes_after'] / 1e6:.1f} MB "
          f"({os.path.getsize(args.output) / 1e6:.2f} MB file, "
          f"{time.perf_counter() - t0:.1f} s)")
    return EXIT_OK


def cmd_generate(args) -> int:
    """Tokens printed as they come; tokens per second (prefill included) on stderr."""
    from .lm import Generator, Sampling
    from .errors import InputError
    gen = Generator(args.model, threads=args.threads)
    if args.prompt_ids:
        prompt = [int(t) for t in args.prompt_ids.split(",")]
    elif gen.tokenizer is None:
        raise InputError("this model has no tokenizer.json beside it (or the tokenizers "
                         "package is missing): give --prompt-ids 1,2,3")
    else:
        prompt = args.prompt
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.repetition_penalty,
                        args.seed)
    t0, n = time.perf_counter(), 0
    for piece in gen.stream(prompt, args.max_new_tokens, sampling):
        print(piece if isinstance(piece, str) else f"{piece} ", end="", flush=True)
        n += 1
    dt = time.perf_counter() - t0
    print()
    print(f"{n} tokens in {dt:.2f} s: {n / dt:.1f} tokens/s ({args.threads} thread(s))",
          file=sys.stderr)
    return EXIT_OK


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def cmd_inspect(args) -> int:
    from .tools import describe, describe_plan, progress_printer, random_feeds
    if args.model.endswith(".ennf"):
        return _inspect_family(args)
    print(describe(args.model))
    if args.plan or args.plot:
        from .api import InferenceSession
        shapes = _parse_shapes(args.shape)
        sess = InferenceSession(args.model, threads=args.threads, tune=args.tune,
                                input_shapes=shapes or None, progress=progress_printer())
        feeds = _parse_inputs(args.input) or random_feeds(sess, shapes)
        if sess.plan is None:   # dynamic dims and no --shape: plan for these feeds (1s)
            sess.run(None, feeds)
        print(describe_plan(sess))
        if args.plot:
            from . import plots
            profile = plots.layer_profile(sess, feeds)
            print(plots.profile_table(profile))
            plots.plot_layer_profile(profile, args.plot, os.path.basename(args.model),
                                     args.threads)
            print(f"wrote {args.plot}")
    return EXIT_OK


def _inspect_family(args) -> int:
    import json

    from .api import load_family
    family = load_family(args.model)
    predicted = family.predict(args.threads) if args.plan or args.target else None
    print(family.table(predicted))
    if predicted:
        from .kernels import isa
        print(f"'here ms': predicted on this device ({isa.describe()}, {args.threads} "
              f"thread(s)) from a probe of the members' layers "
              f"({family.probe(args.threads)['seconds']:.2f} s)")
    chosen = None
    if args.target:
        chosen = family.choose(latency_ms=args.target, threads=args.threads,
                               predicted=predicted)
        print(f"for {args.target:g} ms here: member {chosen.index} ({chosen.describe()}), "
              f"predicted {predicted[chosen.index]:.3f} ms, measured "
              f"{family.measure(chosen, args.threads):.3f} ms")
    if args.plot:
        from . import plots
        plots.plot_pareto(family.search, family.device, args.plot,
                          os.path.basename(args.model),
                          chosen=None if chosen is None else json.loads(chosen.factors.key()),
                          members=[json.loads(m.factors.key()) for m in family.members])
        print(f"wrote {args.plot}")
    return EXIT_OK


def cmd_scale(args) -> int:
    from . import plots
    from .api import load_family
    from .scale.build import build
    latency = None
    if args.latency:
        try:
            lo, hi = (float(v) for v in args.latency.split(":"))
        except ValueError:
            raise SystemExit(f"edgenn: --latency wants LO:HI in ms, e.g. 10:50; got "
                             f"{args.latency!r}")
        if not 0 < lo < hi:
            raise SystemExit(f"edgenn: --latency {args.latency}: want 0 < LO < HI")
        latency = (lo, hi)
    result, doc = build(args.model, args.calib, args.eval, output=args.output,
                        latency=latency, budget=args.budget, minutes=args.minutes,
                        members=args.members, threads=args.threads, metric=args.metric,
                        batch_size=args.batch_size, image_spec=_image_spec(args),
                        cache_root=None if args.no_cache else "default",
                        progress=_stage_printer())
    print(result.table())
    family = load_family(args.output)
    print(family.table())
    if args.plot:
        import json
        plots.plot_pareto(doc["search"], doc["device"], args.plot,
                          os.path.basename(args.model),
                          members=[json.loads(m.factors.key()) for m in family.members])
        print(f"wrote {args.plot}")
    print(f"wrote {args.output} ({os.path.getsize(args.output) / 1e6:.3f} MB)")
    return EXIT_OK


def cmd_export(args) -> int:
    from .extras import require
    require("onnx", "edgenn export writes ONNX")
    from .converters.onnx.exporter import export
    model = export(args.model, args.output)
    ops = sorted({n.op_type for n in model.graph.node})
    custom = sorted({n.op_type for n in model.graph.node if n.domain})
    print(f"wrote {args.output}: {len(model.graph.node)} nodes, opset 21"
          + (f", edgenn-domain ops {custom}" if custom else "") + f"; ops {ops}")
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
    from .api import InferenceSession
    from .tools import random_feeds
    shapes = _parse_shapes(args.shape)
    feeds = _parse_inputs(args.input) or random_feeds(
        InferenceSession(args.model, input_shapes=shapes or None), shapes)
    from .converters.source import is_tflite
    default = "litert" if is_tflite(args.model) else "onnxruntime"
    peers = [p for p in (args.compare or default).split(",") if p]
    from .converters.source import is_enn
    if peers and is_enn(args.model):
        print(f"(the peers read ONNX, not .enn: timing edgenn alone; bench the .onnx to "
              f"compare with {', '.join(peers)})")
        peers = []
    runners = compare(args.model, feeds, args.threads, peers, rounds=args.rounds,
                      shapes=shapes, reference=args.reference)
    print(table(runners, args.threads))
    if args.plot:
        from .plots import plot_bench
        plot_bench(runners, args.plot, os.path.basename(args.model), args.threads)
        print(f"wrote {args.plot}")
    return EXIT_OK


def _stage_printer(stream=None):
    """A progress(stage, done, total) callback: tqdm bars on a terminal, quiet otherwise."""
    from .progress import bars
    return bars(stream, after_s=0.0)


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"edgenn: {what} wants comma-separated numbers; got {text!r}")


def _image_spec(args):
    """An ImageSpec from the image options, or None when none was given (defaults apply)."""
    from .quant.data import ImageSpec
    given = {k: getattr(args, k) for k in ("size", "mean", "std", "layout", "channels",
                                           "resize") if getattr(args, k) is not None}
    if not given:
        return None
    kw = {}
    if "size" in given:
        try:
            h, w = (int(v) for v in given["size"].lower().replace(",", "x").split("x"))
        except ValueError:
            raise SystemExit(f"edgenn: --size wants HxW, e.g. 224x224; got {given['size']!r}")
        kw["size"] = (h, w)
    for key in ("mean", "std"):
        if key in given:
            kw[key] = _floats(given[key], f"--{key}")
    for key in ("layout", "channels", "resize"):
        if key in given:
            kw[key] = given[key]
    return ImageSpec(**kw)


def cmd_quantize(args) -> int:
    from .api import save
    from .quant.quantize import quantize
    t0 = time.perf_counter()
    if args.weights:
        return _quantize_weights(args, t0)
    if not args.calib:
        raise SystemExit("edgenn quantize: give --calib DATA (int8), or --weights int4")
    spec = _image_spec(args)
    graph = quantize(args.model, args.calib, method=args.method, weight_bits=args.weight_bits,
                     per_channel=not args.per_tensor, fidelity=args.fidelity,
                     exclude=tuple(args.exclude or ()), progress=_stage_printer(),
                     percentile=args.percentile, percentile_mode=args.percentile_mode,
                     batch_size=args.batch_size,
                     image_spec=spec, threads=args.threads,
                     speed_check=not args.no_speed_check)
    save(graph, args.output, entropy=args.entropy or None)
    meta = graph.meta.get("quantization", {})
    n_int8 = len(meta.get("layers", []))
    kept = meta.get("fp32_layers") or {}
    print(f"wrote {args.output}: {n_int8} int8 layers, {len(kept)} fp32 "
          f"({os.path.getsize(args.output) / 1e6:.2f} MB, {time.perf_counter() - t0:.1f} s; "
          f"method {args.method}, {args.weight_bits}-bit weights)")
    for name, why in kept.items():
        print(f"  fp32: {name} ({why})")
    check = meta.get("speed_check")
    if check and check.get("int8_ms") is not None:
        print(f"speed check: all-int8 {check['int8_ms']:.2f} ms, with "
              f"{len(check['fp32_kernels'])} layers fp32 {check['with_fp32_ms']:.2f} ms -> "
              f"kept {check['kept']}")
    mixed = meta.get("mixed_precision")
    if mixed:
        last = mixed["search"][-1] if mixed["search"] else {}
        print(f"fidelity target {mixed['target']}: {'met' if mixed['met'] else 'NOT met'} "
              f"(held-out cosine {last.get('cosine', float('nan')):.5f}"
              + (f", top-1 agreement {last['top1']:.2%}" if last.get("top1") is not None
                 else "") + ")")
    if args.report:
        from .quant.accuracy import format_report, report
        data = args.data or args.calib
        if not args.data:
            print("(report on the calibration data: give --data for held-out inputs)")
        rep = report(args.model, graph, data, batch_size=args.batch_size, image_spec=spec,
                     threads=args.threads, progress=_stage_printer())
        print(format_report(rep))
    return EXIT_OK


def _pruning_options(s, channels_flag: str = "--channels"):
    """channels_flag: `compress` has --channels for image data already."""
    g = s.add_argument_group("pruning (compress/prune.py; no retraining)")
    g.add_argument("--sparse", type=float, metavar="R",
                   help="zero this fraction of every pointwise (1x1) conv's weights, by "
                        "magnitude (the first one kept dense)")
    g.add_argument("--pairs", action="store_true",
                   help="with --sparse / --sparse-fc: prune output channels in pairs (the "
                        "same positions for both: the sparse kernels load each input once "
                        "for the two)")
    g.add_argument("--sparse-fc", type=float, metavar="R",
                   help="zero this fraction of every fully connected (MatMul / Gemm) layer's "
                        "constant weights, by magnitude")
    g.add_argument("--pattern", type=int, metavar="K",
                   help="pattern-prune stride-1 3x3 convs: keep K of 9 taps per kernel")
    g.add_argument("--patterns", type=int, default=8, help="patterns per layer (default 8)")
    g.add_argument("--connectivity", type=float, default=0.5, metavar="R",
                   help="with --pattern: remove this fraction of whole kernels (default 0.5)")
    g.add_argument(channels_flag, dest="prune_channels", type=float, metavar="R",
                   help="remove this fraction of the channels of every prunable conv group "
                        "(compress/channels.py), the next layer refitted by least squares "
                        "on --calib")
    g.add_argument("--importance", choices=("l1", "l2", "fpgm"), default="l1")
    g.add_argument("--config", metavar="JSON",
                   help="per-layer channel ratios (from --write-config, edited)")


def _prune_channels(graph, args, calib) -> str:
    from .compress.channels import load_config, prune_channels
    cfg = load_config(args.config) if args.config else {}
    ratio = args.prune_channels if args.prune_channels is not None else cfg.get("ratio", 0.0)
    return prune_channels(graph, ratio, calib=calib,
                          importance_=cfg.get("importance", args.importance),
                          per_layer=cfg.get("layers"), threads=args.threads).table()


def cmd_prune(args) -> int:
    from .api import load, save
    from .compress import prune
    if args.write_config:
        import json

        from .compress.channels import config_for
        with open(args.write_config, "w") as f:
            json.dump(config_for(load(args.model), args.prune_channels or 0.3), f, indent=1)
        print(f"wrote {args.write_config}: edit the ratios, then --config {args.write_config}")
        return EXIT_OK
    if not (args.sparse or args.sparse_fc or args.pattern or args.prune_channels is not None
            or args.config):
        raise SystemExit("edgenn prune: give --sparse R, --sparse-fc R, --pattern K and/or "
                         "--channels R")
    if not args.output:
        raise SystemExit("edgenn prune: -o OUTPUT is required")
    graph = load(args.model)
    if args.prune_channels is not None or args.config:
        if not args.calib:
            print("(no --calib: channels are removed without refitting the next layer)")
        print(_prune_channels(graph, args, args.calib))
    if args.sparse:
        print(prune.sparsify(graph, args.sparse, pairs=args.pairs).table())
    if args.sparse_fc:
        print(prune.sparsify(graph, args.sparse_fc, skip_first=False,
                             layers=prune.fully_connected, pairs=args.pairs).table())
    if args.pattern:
        print(prune.pattern_prune(graph, args.pattern, args.patterns,
                                  args.connectivity).table())
    save(graph, args.output)
    print(f"wrote {args.output} ({os.path.getsize(args.output) / 1e6:.2f} MB)")
    return EXIT_OK


def cmd_compress(args) -> int:
    from .api import save
    from .compress.chain import compress
    from .compress.channels import load_config
    cfg = load_config(args.config) if args.config else {}
    ratio = args.prune_channels if args.prune_channels is not None else cfg.get("ratio")
    progress = lambda stage: print(f"  ... {stage}", flush=True)   # noqa: E731
    if args.fidelity is not None:
        from .compress.chain import PRECISIONS, search
        # the precisions searched: the one asked for, else int8 and int4 weight-only
        precisions = (f"int{args.weight_only}w",) if args.weight_only else \
            ("fp32",) if args.no_int8 else PRECISIONS
        graph, rep, tried = search(args.model, args.calib, fidelity=args.fidelity,
                                   target_size=args.target_size, progress=progress,
                                   precisions=precisions,
                                   importance=cfg.get("importance", args.importance),
                                   sparse=args.sparse, sparse_fc=args.sparse_fc,
                                   pairs=args.pairs, pattern=args.pattern,
                                   patterns=args.patterns, connectivity=args.connectivity,
                                   embeddings=args.embeddings, block=args.block,
                                   entropy=not args.no_entropy, data=args.data,
                                   batch_size=args.batch_size, image_spec=_image_spec(args),
                                   threads=args.threads)
        print("search: " + "; ".join(f"channels -{r:.0%} {p} -> {s:.2f}x, cosine {c:.4f}"
                                     for r, p, s, c in tried))
        save(graph, args.output)
        print(rep.table())
        print(f"wrote {args.output} ({os.path.getsize(args.output) / 1e6:.3f} MB)")
        return EXIT_OK
    graph, rep = compress(args.model, args.calib, channels=ratio,
                          importance=cfg.get("importance", args.importance),
                          channel_layers=cfg.get("layers"), sparse=args.sparse,
                          sparse_fc=args.sparse_fc, pairs=args.pairs,
                          pattern=args.pattern,
                          patterns=args.patterns, connectivity=args.connectivity,
                          embeddings=args.embeddings, int8=not args.no_int8,
                          weight_only=args.weight_only, block=args.block,
                          entropy=not args.no_entropy, data=args.data,
                          batch_size=args.batch_size, image_spec=_image_spec(args),
                          threads=args.threads, progress=progress)
    save(graph, args.output)
    print(rep.table())
    print(f"wrote {args.output} ({os.path.getsize(args.output) / 1e6:.3f} MB; fidelity "
          f"against the fp32 model on {'--data' if args.data else 'the calibration data'}; "
          f"latency: this CPU, {args.threads} thread(s))")
    return EXIT_OK


def cmd_accuracy(args) -> int:
    import json

    from .quant.accuracy import format_report, report
    rep = report(args.fp32_model, args.int8_model, args.data, batch_size=args.batch_size,
                 image_spec=_image_spec(args), threads=args.threads,
                 reference=args.reference, progress=_stage_printer())
    print(format_report(rep))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=1, default=float)
        print(f"wrote {args.json}")
    return EXIT_OK


def cmd_finetune(args) -> int:
    import numpy as np
    from .api import load, save
    from .train import finetune
    graph = load(args.model)
    with np.load(args.data) as data:
        key = args.inputs or next((k for k in (graph.inputs[0].name, "inputs", "images")
                                   if k in data), None)
        if key is None or key not in data or args.labels not in data:
            raise ValueError(f"{args.data}: needs an inputs array ({key or graph.inputs[0].name!r}"
                             f", or --inputs KEY) and a labels array ({args.labels!r}); it has "
                             f"{sorted(data)}")
        x, y = data[key], data[args.labels]
    bar = _stage_printer()
    tuned, rep = finetune(graph, x, y, layers=args.layers, epochs=args.epochs, lr=args.lr,
                          threads=args.threads,
                          progress=lambda e, n, acc: bar("fine-tuning (epochs)", e, n))
    save(tuned, args.output)
    print(f"fine-tuned {', '.join(rep['layers'])} on {rep['samples']['train']} samples "
          f"({rep['samples']['val']} held out to pick the epoch): validation accuracy "
          f"{rep['before']['val']:.1%} -> {rep['after']['val']:.1%}; wrote {args.output}")
    return EXIT_OK


def cmd_demo(args) -> int:
    from .demo import main as demo
    return demo(threads=args.threads)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="edgenn", description=__doc__.splitlines()[0],
                                epilog="exit codes: 0 ok, 1 check mismatch, 2 usage, "
                                       "3 model/input rejected, 4 internal error")
    from .version import __version__
    p.add_argument("--version", action="version", version=f"edgenn {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    data_help = ".npy/.npz file, folder of .npy/.npz files, or folder of images"

    e = sub.add_parser("export", help=".enn (or .onnx) -> its optimized graph as ONNX")
    e.add_argument("model")
    e.add_argument("-o", "--output", required=True)
    e.set_defaults(fn=cmd_export)
    c = sub.add_parser("convert", help="ONNX -> optimized .enn")
    c.add_argument("model")
    c.add_argument("-o", "--output", required=True)
    c.add_argument("--weights", choices=("fp32", "int8", "int4"), default="fp32",
                   help="weight-only coding for size: int8 per channel or int4 in blocks of "
                        "32, decoded to fp32 at load (compute stays fp32)")
    c.add_argument("--calib", metavar="DATA",
                   help="with --weights: choose the codes of MatMul / Gemm / Conv weights by "
                        "GPTQ on this calibration data (" + data_help + ")")
    c.add_argument("--block", type=int, metavar="N",
                   help="with --weights: values per scale along a channel (default 32 for "
                        "int4, the whole channel for int8)")
    c.add_argument("--threads", type=int, default=1, help="threads for the calibration runs")
    c.add_argument("--entropy", action="store_true",
                   help="store int8 / int4 weights zstd-coded (decoded once at load)")
    c.add_argument("--encrypt", action="store_true",
                   help="seal the .enn with the key in $EDGENN_MODEL_KEY (32 bytes, hex; "
                        "never on the command line); every command then opens it with it")
    c.set_defaults(fn=cmd_convert)

    def model_cmd(name, help_, fn):
        s = sub.add_parser(name, help=help_)
        s.add_argument("model", help=".onnx or .enn")
        s.add_argument("--threads", type=int, default=1)
        s.add_argument("--shape", action="append", metavar="NAME=D1,D2,..",
                       help="bind an input's dynamic dims")
        s.add_argument("--input", action="append", metavar="NAME=FILE.npy")
        s.add_argument("--tune", choices=("background", "off", "cached", "full"),
                       default=None,
                       help="kernel choice: background (default: untimed first plan, "
                            "tuned in the background), off (no timing), cached (time what "
                            "the cache lacks before the first run), full (retime); or "
                            "EDGENN_TUNE")
        s.set_defaults(fn=fn)
        return s

    r = model_cmd("run", "run a model on given (or random) inputs", cmd_run)
    r.add_argument("--output-dir", help="save outputs as .npy here instead of printing")
    k = model_cmd("check", "compare edgenn with onnxruntime on the same inputs", cmd_check)
    k.add_argument("--tolerance", type=float, default=1e-4,
                   help="max relative error max|a-b|/max|b| (default 1e-4)")
    b = model_cmd("bench", "latency side by side with onnxruntime / MNN", cmd_bench)
    b.add_argument("--compare", default=None,
                   help="comma list: onnxruntime,mnn,litert (default: onnxruntime; litert "
                        "for a .tflite model)")
    b.add_argument("--rounds", type=int, default=20)
    b.add_argument("--reference", action="store_true", help="time the reference kernels")
    b.add_argument("--plot", metavar="PNG", help="draw the rounds side by side (matplotlib)")
    i = model_cmd("inspect", "ops, parameters, sizes, fusions; --plan: kernels chosen",
                  cmd_inspect)
    i.add_argument("--plan", action="store_true",
                   help="also build the plan: per layer the candidates, times and choice "
                        "(a .ennf family: each member's latency predicted here)")
    i.add_argument("--plot", metavar="PNG",
                   help="with the plan: profile a few runs, draw the per-layer times "
                        "(matplotlib); a .ennf family: its Pareto front")
    i.add_argument("--target", type=float, metavar="MS",
                   help="a .ennf family: the member chosen here for this latency target")
    def data_options(s):
        s.add_argument("--batch-size", type=int, default=None,
                       help="rows per batch when splitting large arrays (default 32)")
        g = s.add_argument_group("image folders (preprocessing)")
        g.add_argument("--size", help="HxW of the model input (default: from the model)")
        g.add_argument("--mean", help="per-channel mean of pixel/255, e.g. 0.485,0.456,0.406")
        g.add_argument("--std", help="per-channel std of pixel/255, e.g. 0.229,0.224,0.225")
        g.add_argument("--layout", choices=("NCHW", "NHWC"))
        g.add_argument("--channels", choices=("RGB", "BGR", "L"))
        g.add_argument("--resize", choices=("stretch", "pad"),
                       help="pad: keep the aspect ratio, pad right with zeros (OCR lines)")
        s.add_argument("--threads", type=int, default=1)

    qz = sub.add_parser("quantize", help="int8 post-training quantization, or low-bit "
                                         "weights (--weights int4) -> .enn")
    qz.add_argument("model", help="fp32 .onnx or .enn")
    qz.add_argument("--calib", metavar="DATA", help="calibration data (int8; not for "
                    "--weights): " + data_help)
    qz.add_argument("--weights", choices=("int4", "int8"),
                    help="weight-only: every float MatMul / Gemm weight as MatMulNBits codes "
                         "that stay low-bit at run time (decoders); no calibration data")
    qz.add_argument("--block", type=int, default=32, help="--weights: values per scale")
    qz.add_argument("--fit", choices=("admm", "maxabs"), default="admm",
                    help="--weights: how each block's scale is chosen")
    qz.add_argument("-o", "--output", required=True)
    qz.add_argument("--method", choices=("minmax", "percentile", "kl", "admm", "auto"),
                    default="minmax")
    qz.add_argument("--weight-bits", type=int, choices=(7, 8), default=7)
    qz.add_argument("--per-tensor", action="store_true",
                    help="one weight scale per layer (default: per output channel)")
    qz.add_argument("--percentile", type=float, default=99.99,
                    help="for --method percentile (default 99.99)")
    qz.add_argument("--percentile-mode", choices=("abs", "tails"), default="abs",
                    help="clip |x| at the percentile, or each tail of x")
    qz.add_argument("--fidelity", type=float, default=None,
                    help="e.g. 0.99: keep the most sensitive layers fp32 until the held-out "
                         "output cosine (and top-1 agreement) reaches it")
    qz.add_argument("--exclude", action="append", metavar="NODE_OR_OP",
                    help="keep this node (or every node of this op type) fp32")
    qz.add_argument("--no-speed-check", action="store_true",
                    help="keep every quantizable layer int8, even those this CPU runs "
                         "faster in fp32 (default: measured, the faster model kept)")
    qz.add_argument("--entropy", action="store_true",
                    help="store the int8 weights zstd-coded (decoded once at load)")
    qz.add_argument("--report", action="store_true", help="print the fp32 vs int8 report")
    qz.add_argument("--data", metavar="DATA", help="held-out inputs for --report")
    data_options(qz)
    qz.set_defaults(fn=cmd_quantize)

    ac = sub.add_parser("accuracy", help="fp32 vs int8 model on the same inputs")
    ac.add_argument("fp32_model")
    ac.add_argument("int8_model")
    ac.add_argument("--data", required=True, metavar="DATA", help=data_help)
    ac.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    ac.add_argument("--reference", action="store_true",
                    help="run the int8 model on the reference kernels")
    data_options(ac)
    ac.set_defaults(fn=cmd_accuracy)

    pr = sub.add_parser("prune", help="channel, magnitude or pattern pruning")
    pr.add_argument("model")
    pr.add_argument("-o", "--output")
    pr.add_argument("--calib", metavar="DATA", help="calibration data for the channel refit: "
                                                    + data_help)
    pr.add_argument("--write-config", metavar="JSON",
                    help="write the model's prunable groups with --channels (or 0.3) and stop")
    pr.add_argument("--threads", type=int, default=1)
    _pruning_options(pr)
    pr.set_defaults(fn=cmd_prune)

    cz = sub.add_parser("compress", help="prune -> int8 -> entropy coding, measured per step")
    cz.add_argument("model")
    cz.add_argument("--calib", required=True, metavar="DATA", help="calibration data: " + data_help)
    cz.add_argument("--data", metavar="DATA", help="held-out data for fidelity: " + data_help)
    cz.add_argument("-o", "--output", required=True)
    cz.add_argument("--embeddings", type=int, choices=(8, 4),
                    help="store embedding tables (Gathers over >= 1024-row constants) as "
                         "int8 or int4 QGather")
    cz.add_argument("--fidelity", type=float, metavar="COS",
                    help="search: the smallest chain (channel ratio x int8 / int4 "
                         "weight-only, or the --weight-only asked) that keeps this output "
                         "cosine against fp32 on --data (e.g. 0.99)")
    cz.add_argument("--target-size", type=float, metavar="X",
                    help="with --fidelity: also at least X times smaller than fp32")
    cz.add_argument("--no-int8", action="store_true", help="skip quantization")
    cz.add_argument("--weight-only", type=int, choices=(8, 4), metavar="BITS",
                    help="instead of int8 quantization: weight-only int8 / int4 codes chosen "
                         "by GPTQ on the calibration data (compute stays fp32)")
    cz.add_argument("--block", type=int, metavar="N",
                    help="with --weight-only: values per scale (default 32 for int4)")
    cz.add_argument("--no-entropy", action="store_true", help="skip entropy coding")
    _pruning_options(cz, "--prune-channels")
    data_options(cz)
    cz.set_defaults(fn=cmd_compress)

    sc = sub.add_parser("scale", help="a family of models over a latency range, measured "
                                      "here -> .ennf")
    sc.add_argument("model")
    sc.add_argument("--calib", required=True, metavar="DATA", help="calibration data: " + data_help)
    sc.add_argument("--eval", metavar="DATA",
                    help="held-out data for fidelity (labels give accuracy): " + data_help)
    sc.add_argument("-o", "--output", required=True, help="the family file (.ennf)")
    sc.add_argument("--latency", metavar="LO:HI", help="the range to cover, ms on this host")
    sc.add_argument("--budget", type=int, default=24, help="candidates to measure (24)")
    sc.add_argument("--minutes", type=float, help="and/or a time limit for the search")
    sc.add_argument("--members", type=int, default=6, help="at most this many members (6)")
    sc.add_argument("--metric", choices=("auto", "accuracy", "top1", "cosine", "iou", "text"),
                    default="auto", help="fidelity: auto = accuracy with labels, else "
                                         "top-1 agreement for classifiers, else cosine; "
                                         "iou: a detector's map > 0.3 against the source's; "
                                         "text: a CTC recognizer's greedy reading, 1 - "
                                         "edit distance / length")
    sc.add_argument("--plot", metavar="PNG", help="draw the Pareto front (matplotlib)")
    sc.add_argument("--no-cache", action="store_true", help="measure everything again")
    data_options(sc)
    sc.set_defaults(fn=cmd_scale)

    f = sub.add_parser("finetune", help="retrain the last layer(s) on your own labelled data")
    f.add_argument("model")
    f.add_argument("--data", required=True, help=".npz with the inputs and a labels array")
    f.add_argument("--inputs", help="the inputs array in --data (default: the model's "
                                    "input name, 'inputs' or 'images')")
    f.add_argument("--labels", default="labels")
    f.add_argument("--layers", type=int, default=1, help="trailing fully connected layers")
    f.add_argument("--epochs", type=int, default=100)
    f.add_argument("--lr", type=float, default=0.01)
    f.add_argument("--threads", type=int, default=1)
    f.add_argument("-o", "--output", required=True)
    f.set_defaults(fn=cmd_finetune)
    t = sub.add_parser("tune", help="time every layer's kernels now (an install step), "
                                    "or export / import the tuning cache")
    t.add_argument("model", nargs="?", help=".onnx, .tflite or .enn to tune")
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--shape", action="append", metavar="NAME=D1,D2,..",
                   help="bind an input's dynamic dims")
    t.add_argument("--full", action="store_true", help="retime what is cached too")
    t.add_argument("--export", metavar="FILE.json",
                   help="then write this CPU's whole tuning cache to FILE (to ship)")
    t.add_argument("--import", dest="import_file", metavar="FILE.json",
                   help="merge an exported cache (same CPU and edgenn build) into this one")
    t.set_defaults(fn=cmd_tune)

    g = sub.add_parser("generate", help="text from a decoder language model, token by token")
    g.add_argument("model", help="decoder .onnx / .enn, or its folder (genai_config.json, "
                                 "tokenizer.json beside it)")
    g.add_argument("--prompt", default="", help="the prompt text")
    g.add_argument("--prompt-ids", metavar="ID,ID,..", help="the prompt as token ids")
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--seed", type=int)
    g.add_argument("--threads", type=int, default=1)
    g.set_defaults(fn=cmd_generate)

    d = sub.add_parser("demo", help="convert, check and run the embedded default model")
    d.add_argument("--threads", type=int, default=1)
    d.set_defaults(fn=cmd_demo)
    return p


def main(argv=None) -> int:
    from .errors import EdgennError
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:          # --help, --version, usage errors: argparse's code
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    try:
        return args.fn(args)
    except SystemExit as exc:          # a command's own usage error (a message)
        if not isinstance(exc.code, str):
            raise
        print(exc.code, file=sys.stderr)
        return EXIT_USAGE
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
