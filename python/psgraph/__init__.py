"""psgraph: a parameter-server training framework in C, and this Python face over it.

`import psgraph.compat.v1 as tf` gives TensorFlow 1.x's graph API (docs/python.md); the
graphs are built by psgraph's C builders and run by its C sessions."""
from . import _psgraph  # noqa: F401  (the C library)
from . import errors  # noqa: F401  (registers the exception classes)

__version__ = "0.1.0"
from ._onnx import export_onnx  # noqa: F401,E402  (a Python model out as ONNX)
from . import train  # noqa: F401,E402  (psgraph's strategies for a Python model)
