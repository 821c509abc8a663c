"""The .tflite models that the mediapipe==0.10.14 wheel ships (the 1.x wheels ship none):
downloaded once with pip (no install, no dependencies), their .tflite files unpacked into
the test-model cache (models.default_cache_dir), and real-image inputs for each."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

WHEEL = "mediapipe==0.10.14"
# name -> path inside the wheel; the models whose ops edgenn converts (the others carry
# mediapipe custom ops or sparse weights: test_tflite.py checks they are refused by name)
MODELS = {
    "face_detection_short_range": "mediapipe/modules/face_detection/face_detection_short_range.tflite",
    "face_landmark": "mediapipe/modules/face_landmark/face_landmark.tflite",
    "hand_landmark_lite": "mediapipe/modules/hand_landmark/hand_landmark_lite.tflite",
    "hand_landmark_full": "mediapipe/modules/hand_landmark/hand_landmark_full.tflite",
    "hand_recrop": "mediapipe/modules/holistic_landmark/hand_recrop.tflite",
    "iris_landmark": "mediapipe/modules/iris_landmark/iris_landmark.tflite",
    "palm_detection_lite": "mediapipe/modules/palm_detection/palm_detection_lite.tflite",
    "palm_detection_full": "mediapipe/modules/palm_detection/palm_detection_full.tflite",
    "pose_landmark_full": "mediapipe/modules/pose_landmark/pose_landmark_full.tflite",
}
REFUSED = {
    "selfie_segmentation": ("mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
                            "Convolution2DTransposeBias"),
    "pose_detection": ("mediapipe/modules/pose_detection/pose_detection.tflite", "DENSIFY"),
    "face_landmark_with_attention": (
        "mediapipe/modules/face_landmark/face_landmark_with_attention.tflite",
        "Landmarks2TransformMatrix"),
}


def _root() -> Path:
    from .models import default_cache_dir
    return Path(default_cache_dir()) / "mediapipe-0.10.14"


def path(name: str) -> Path:
    """The unpacked .tflite file of model `name` (downloading the wheel on first use)."""
    rel = MODELS[name] if name in MODELS else REFUSED[name][0]
    target = _root() / rel
    if not target.exists():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", WHEEL, "--no-deps",
                            "--only-binary", ":all:", "-d", tmp, "-q"], check=True,
                           timeout=900)
            wheel = next(Path(tmp).glob("mediapipe-*.whl"))
            with zipfile.ZipFile(wheel) as z:
                for member in z.namelist():
                    if member.endswith(".tflite"):
                        z.extract(member, _root())
    return target


def image_input(shape, dtype=np.float32, name: str = "astronaut") -> np.ndarray:
    """A real photo (scikit-image) resized to an NHWC input shape, in [0, 1] (what the
    mediapipe graphs feed these models)."""
    from skimage import data, transform
    img = getattr(data, name)()
    if img.ndim == 2:
        img = np.stack([img] * 3, -1)
    n, h, w, c = shape
    x = transform.resize(img[..., :c], (h, w), anti_aliasing=True).astype(np.float32)
    return np.broadcast_to(x, (n, h, w, c)).astype(dtype)
