"""ONNX export of a model built in Python: `psgraph.export_onnx(session, inputs, outputs,
path)` writes the subgraph that computes `outputs` from `inputs`, with the session's
current variable values as initializers, through the same C writer as `psgraph export`
(serving/onnx_export.c; docs/serving.md). ONNX Runtime checks what it writes in the tests."""
from psgraph import _graph


def _named(what, tensors, graph):
    """[(name, endpoint)] of a {name: Tensor} dict or a list of Tensors (named by their op,
    with ':k' for an output k > 0), each a Tensor of `graph`."""
    if isinstance(tensors, _graph.Tensor):
        tensors = [tensors]
    items = tensors.items() if isinstance(tensors, dict) else (
        (t.op.name if getattr(t, "value_index", 0) == 0 else t.name, t) for t in tensors)
    out = []
    for name, t in items:
        if not isinstance(t, _graph.Tensor):
            raise TypeError("export_onnx: %s '%s' is a %s, not a Tensor" % (what, name, type(t).__name__))
        if t.graph is not graph:
            raise ValueError("export_onnx: %s %s is not in the session's graph" % (what, t.name))
        out.append((str(name), t._ep))
    if not out:
        raise ValueError("export_onnx: no %ss given" % what)
    return out


def export_onnx(session, inputs, outputs, path, doc=None, version=0):
    """Writes an ONNX model (opset 17) to `path`: `inputs` are Placeholders, `outputs` any
    tensors, each a {name: Tensor} dict or a list of Tensors. Raises psgraph's error naming
    the node when an op has no ONNX form or a variable is not initialized."""
    runner = getattr(session, "_runner", None)
    c = getattr(runner, "_s", None)
    if c is None or not hasattr(c, "export_onnx"):
        raise ValueError("export_onnx: the session must be an open local psgraph Session")
    g = session.graph
    c.export_onnx(str(path), _named("input", inputs, g), _named("output", outputs, g), doc, int(version))
