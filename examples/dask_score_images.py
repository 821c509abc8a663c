"""Score a folder of images on a Dask cluster with edgenn (pip install 'edgenn[dask]').

    python examples/dask_score_images.py DIR [--scheduler tcp://host:8786] [--workers 2]
    python examples/dask_score_images.py --make-demo-folder /tmp/digits   # 8x8 PNGs to try

Each worker gets the model once and keeps one session; files are read and scored where
the task runs. Prints one line per image: path, predicted class, probability.
"""
import argparse
import os
import sys

import numpy as np


def read_digit(path: str) -> np.ndarray:
    """An 8x8 grey PNG -> the digits CNN's input row (1, 8, 8) float32 in [0, 1]."""
    from PIL import Image
    return (np.asarray(Image.open(path).convert("L"), np.float32) / 255.0)[None]


def make_demo_folder(folder: str) -> None:
    from PIL import Image
    from edgenn.demo import DEMO_MODEL
    os.makedirs(folder, exist_ok=True)
    images = np.load(DEMO_MODEL.replace("digits.onnx", "digits_samples.npz"))["images"]
    for k, img in enumerate(images):
        Image.fromarray((img[0] * 255).round().astype(np.uint8)).save(
            os.path.join(folder, f"digit_{k:04d}.png"))
    print(f"wrote {len(images)} images to {folder}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("folder", nargs="?")
    p.add_argument("--model", default=None, help="default: the embedded digits CNN")
    p.add_argument("--scheduler", help="a running scheduler; default: a local cluster")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--make-demo-folder")
    args = p.parse_args()
    if args.make_demo_folder:
        make_demo_folder(args.make_demo_folder)
        return 0
    if not args.folder:
        p.error("give a folder of images (or --make-demo-folder DIR)")
    from dask.distributed import Client, LocalCluster
    from edgenn.batch.dask import score_files
    from edgenn.demo import DEMO_MODEL
    paths = sorted(os.path.join(args.folder, f) for f in os.listdir(args.folder)
                   if f.lower().endswith((".png", ".jpg", ".jpeg")))
    cluster = None if args.scheduler else LocalCluster(
        n_workers=args.workers, threads_per_worker=1, dashboard_address=None)
    with Client(args.scheduler or cluster) as client:
        rows = score_files(client, args.model or DEMO_MODEL, paths, load=read_digit).compute()
    for path, probs in rows:
        print(f"{path}\t{int(np.argmax(probs))}\t{float(np.max(probs)):.3f}")
    if cluster is not None:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
