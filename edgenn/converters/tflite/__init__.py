"""TFLite front door (importer.py; reader.py parses the flatbuffer)."""
from .importer import import_tflite

__all__ = ["import_tflite"]
