"""Batch-scoring throughput on a local Dask cluster against the number of workers (one
thread each, sessions with threads=1), edgenn/batch/dask.py.

    python bench/compare_dask_workers.py mobilenet_v2-op13 --images 256 --workers 1,2

Each measure scores a dask array of --images images (chunks of --chunk, made on the
workers, so only the outputs travel) end to end, after a warm-up job that ships the model
and makes the workers' sessions; medians of --rounds (default 15).
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def main():
    from edgenn import bench
    args = bench.script_args(__doc__.splitlines()[0], images=256, chunk=16, workers="1,2")
    import dask.array as da
    from dask.distributed import Client, LocalCluster
    from edgenn.batch.dask import score_array
    from support.models import ZOO
    for name in args.models:
        path, feeds = ZOO[name]()
        (inp, x), = feeds.items()
        base_rows = x.astype(x.dtype)

        def block(k):       # made on the worker: no input bytes travel from the client
            return np.repeat(base_rows, args.chunk, axis=0)[:args.chunk]
        blocks = [da.from_delayed(__import__("dask").delayed(block)(k),
                                  (args.chunk,) + x.shape[1:], x.dtype)
                  for k in range(args.images // args.chunk)]
        arr = da.concatenate(blocks)
        base = None
        print(f"\n{name}: {args.images} images, chunks of {args.chunk}")
        for n in [int(w) for w in args.workers.split(",")]:
            with LocalCluster(n_workers=n, threads_per_worker=1, dashboard_address=None) as c, \
                    Client(c) as client:
                score_array(client, str(path), arr).compute()          # warm-up
                times = []
                for _ in range(args.rounds):
                    t0 = time.perf_counter()
                    score_array(client, str(path), arr).compute()
                    times.append(time.perf_counter() - t0)
            rate = args.images / float(np.median(times))
            base = base or rate
            print(f"  {n} worker(s): {rate:7.1f} images/s  ({rate / base:.2f}x)")


if __name__ == "__main__":
    main()
