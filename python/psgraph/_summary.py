"""tf.summary over psgraph: scalar and histogram summaries fetched by Session.run (their
values computed by the graph), merged, and written by FileWriter through the C library's
TensorBoard writer (psgraph/summary.h: event files TensorBoard reads)."""
import os

from . import _psgraph
from ._graph import GraphKeys, convert_to_tensor, get_default_graph


class Summary:
    """What running a summary op gives: (kind, tag, value) entries, written by
    FileWriter.add_summary. Also TF's hand-made form: Summary(value=[Summary.Value(tag=...,
    simple_value=...)])."""

    class Value:
        def __init__(self, tag="", simple_value=None, histo=None):
            self.tag = tag
            self.simple_value = simple_value
            self.histo = histo

    def __init__(self, value=None, _entries=None):
        self._entries = list(_entries or [])
        for v in value or []:
            if v.simple_value is not None:
                self._entries.append(("scalar", v.tag, v.simple_value))
            elif v.histo is not None:
                self._entries.append(("histogram", v.tag, v.histo))

    @property
    def value(self):
        return [Summary.Value(tag, simple_value=float(val)) if kind == "scalar"
                else Summary.Value(tag, histo=val) for kind, tag, val in self._entries]

    def __repr__(self):
        return "Summary(%s)" % ", ".join("%s %s" % (k, t) for k, t, _ in self._entries)


class _SummaryOp:
    """A summary in the graph: fetching it gives a Summary."""

    def __init__(self, entries, name):
        self._entries_def = entries  # [(kind, tag, Tensor)]
        self.name = name
        self.graph = entries[0][2].graph if entries else get_default_graph()

    def _summary_tensors(self):
        return [t for _, _, t in self._entries_def]

    def _pack(self, values):
        return Summary(_entries=[(k, tag, v) for (k, tag, _), v in zip(self._entries_def, values)])

    def __repr__(self):
        return "<summary %s>" % self.name


def _tag(name, family=None):
    g = get_default_graph()
    scope = g.get_name_scope()
    base = "%s/%s" % (family, name) if family else name
    return "%s/%s" % (scope, base) if scope else base


def _add(entries, name, collections):
    op = _SummaryOp(entries, name)
    g = op.graph
    for c in (collections if collections is not None else [GraphKeys.SUMMARIES]):
        g.add_to_collection(c, op)
    return op


def scalar(name, tensor, collections=None, family=None):
    t = convert_to_tensor(tensor)
    if t.shape.ndims not in (None, 0) and t.shape.num_elements() != 1:
        raise ValueError("tf.summary.scalar takes a scalar, got shape %s" % t.shape)
    return _add([("scalar", _tag(name, family), t)], name, collections)


def histogram(name, values, collections=None, family=None):
    t = convert_to_tensor(values)
    return _add([("histogram", _tag(name, family), t)], name, collections)


def merge(inputs, collections=None, name=None):
    entries = [e for s in inputs for e in s._entries_def]
    op = _SummaryOp(entries, name or "Merge/MergeSummary")
    for c in collections or []:
        op.graph.add_to_collection(c, op)
    return op


def merge_all(key=GraphKeys.SUMMARIES, scope=None, name=None):
    items = get_default_graph().get_collection(key, scope)
    if not items:
        return None
    return merge(items, name=name or "Merge/MergeSummary")


class FileWriter:
    """An event file in logdir (psgraph's writer: events.out.tfevents.<time>.<host>.<pid>)."""

    def __init__(self, logdir, graph=None, max_queue=10, flush_secs=120, graph_def=None,
                 filename_suffix=None, session=None):
        os.makedirs(logdir, exist_ok=True)
        self._logdir = logdir
        self._w = _psgraph.summary_writer(logdir)

    def get_logdir(self):
        return self._logdir

    @property
    def path(self):
        return _psgraph.summary_path(self._w)

    def add_summary(self, summary, global_step=None):
        if isinstance(summary, (bytes, str)):
            raise TypeError("psgraph's summaries are Summary objects (from Session.run), not "
                            "serialized protocol buffers")
        step = 0 if global_step is None else int(global_step)
        for kind, tag, value in summary._entries:
            if kind == "scalar":
                _psgraph.summary_scalar(self._w, step, tag, float(value))
            else:
                _psgraph.summary_histogram(self._w, step, tag, value)

    def add_graph(self, graph, global_step=None, graph_def=None):
        pass  # psgraph writes no GraphDef (TensorBoard's graph tab stays empty)

    def add_session_log(self, session_log, global_step=None):
        pass

    def add_run_metadata(self, run_metadata, tag, global_step=None):
        pass

    def flush(self):
        pass  # every event is flushed when written

    def reopen(self):
        pass

    def close(self):
        _psgraph.summary_close(self._w)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
