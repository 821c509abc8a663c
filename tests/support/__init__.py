"""What the tests share (one package, imported as `support.<module>`; tests/ is on sys.path,
the first folder up without an __init__.py): ONNX model builders (helpers.py: one-node
models, onnxruntime runs, the CLI runner; opmodels.py: the op-family tests' builders),
the model zoo (models.py), ONNX backend node cases (nodecases.py), real calibration and
evaluation data (quant_data.py), real speech (speech.py), TFLite files (tflite_writer.py,
int8_tflite_models.py, mediapipe_models.py), the kernel tables' rows (kernel_tables.py)
and the per-op kernel cases (kernel_cases/)."""
