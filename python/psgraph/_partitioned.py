"""Partitioned variables as TF 1.x's (tf.get_variable(..., partitioner=...)): a variable
split along its first axis into shards "NAME/part_0", "NAME/part_1", ... (TensorFlow's names
and row split: the first dim0 % n shards one row more), each a variable of its own, so that
under tf.train.replica_device_setter each lands on a ps task of its own. Used as a tensor,
it is the concatenation of its shards' reads (the gradient flows back to each shard);
tf.nn.embedding_lookup takes it as its list of shards. The partitioners:
fixed_size_partitioner, min_max_variable_partitioner and variable_axis_size_partitioner;
dense_kernel_partitioner is psgraph's default for a tf.layers.dense kernel under a replica
device setter with shard_bytes (psgraph train --shard-bytes's rule, in rows)."""
import math
import re

# psgraph train's most column shards of one weight (PSG_MODEL_MAX_SHARDS)
MAX_DEFAULT_SHARDS = 8


def fixed_size_partitioner(num_shards, axis=0):
    def _partitioner(shape, dtype):
        if axis != 0:
            raise NotImplementedError("psgraph partitions variables along axis 0 only")
        parts = [1] * len(shape)
        parts[0] = min(int(num_shards), int(shape[0]))
        return parts
    return _partitioner


def min_max_variable_partitioner(max_partitions=1, axis=0, min_slice_size=256 << 10,
                                 bytes_per_string_element=16):
    """As many shards as keep each at least min_slice_size bytes, at most max_partitions
    (and the rows)."""
    def _partitioner(shape, dtype):
        if axis != 0:
            raise NotImplementedError("psgraph partitions variables along axis 0 only")
        total = dtype.size
        for d in shape:
            total *= int(d)
        n = max(1, min(int(max_partitions), int(math.ceil(total / float(min_slice_size))),
                       int(shape[0])))
        parts = [1] * len(shape)
        parts[0] = n
        return parts
    return _partitioner


def variable_axis_size_partitioner(max_shard_bytes, axis=0, bytes_per_string_element=16,
                                   max_shards=None):
    """As few shards as keep each at most max_shard_bytes (whole rows), at most max_shards."""
    if max_shard_bytes < 1:
        raise ValueError("max_shard_bytes must be positive, got %r" % (max_shard_bytes,))

    def _partitioner(shape, dtype):
        if axis != 0:
            raise NotImplementedError("psgraph partitions variables along axis 0 only")
        dims = [int(d) for d in shape]
        row_bytes = dtype.size
        for d in dims[1:]:
            row_bytes *= d
        rows_per_shard = max(1, int(max_shard_bytes) // max(1, row_bytes))
        n = int(math.ceil(dims[0] / float(rows_per_shard)))
        if max_shards:
            n = min(n, int(max_shards))
        parts = [1] * len(dims)
        parts[0] = max(1, n)
        return parts
    return _partitioner


def dense_kernel_partitioner(graph, shape, dtype):
    """The partitioner of a tf.layers.dense kernel of shape and dtype made now in graph:
    under a replica device setter with shard_bytes > 0, no partitioner in the variable scope
    and the kernel bigger than shard_bytes, as many row shards as psgraph train makes column
    shards (ceil(bytes / shard_bytes), at most 8 and the rows); else None (the scope's, or
    none)."""
    from . import _variables
    setter = graph._replica_setters[-1] if graph._replica_setters else None
    limit = getattr(setter, "shard_bytes", 0) if setter is not None else 0
    if limit <= 0 or _variables.get_variable_scope().partitioner is not None:
        return None
    dims = [int(d) for d in shape]
    total = dtype.size
    for d in dims:
        total *= d
    n = min(int(math.ceil(total / float(limit))), MAX_DEFAULT_SHARDS, dims[0])
    return fixed_size_partitioner(n) if n > 1 else None


class PartitionedVariable:
    """The shards of one variable (tf.PartitionedVariable): iterate it for the shards; as a
    tensor it is their concatenation along axis 0."""

    def __init__(self, name, shape, dtype, variables):
        self._name, self._shape, self._dtype = name, shape, dtype
        self._variables = list(variables)
        self._concat = None

    def __iter__(self):
        return iter(self._variables)

    def __len__(self):
        return len(self._variables)

    def _get_variable_list(self):
        return list(self._variables)

    @property
    def name(self):
        return self._name

    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        return self._shape

    def get_shape(self):
        return self._shape

    def _as_tensor(self):
        if self._concat is None:
            from . import _array_ops
            g = self._variables[0].graph
            with g.control_dependencies(None), g.name_scope(None):
                self._concat = _array_ops.concat([v._as_tensor() for v in self._variables], 0,
                                                 name=self._name + "/ConcatPartitions/concat")
        return self._concat

    as_tensor = _as_tensor

    def __repr__(self):
        return "<tf.PartitionedVariable '%s' shape=%s shards=%d>" % (
            self._name, self._shape, len(self._variables))


def _of_whole(init, whole, dtype):
    """The initializer of a shard: one the C library draws, with the scale of the whole
    variable's shape (glorot's and variance scaling's fans are the whole's, as TF's
    partition_info gives them); any other as it is."""
    from . import _variables
    init = _variables._as_initializer(init, dtype)
    if not isinstance(init, _variables.Initializer):
        return init

    class _Shard(_variables.Initializer):
        seed = getattr(init, "seed", None)

        def _c_kind(self, shape, seed):
            if isinstance(init, _variables.glorot_uniform_initializer):
                return _variables.variance_scaling_initializer(
                    1.0, "fan_avg", "uniform")._c_kind(whole, seed)
            return init._c_kind(whole, seed)

        def __call__(self, shape, dtype=None, partition_info=None):
            from ._graph import get_default_graph
            g = get_default_graph()
            if self._c_kind(shape, g._op_seed(self.seed)) is not None:
                return _variables.Initializer.__call__(self, shape, dtype)
            return init(shape, dtype=dtype)
    return _Shard()


def make(get_variable, full, name, shape, dtype, split, initializer=None, **kwargs):
    """The shards of `name` (full: its scoped name) made with get_variable (the caller's;
    kwargs tell it not to partition them), split as split(shape, dtype) says, each drawn
    with the whole variable's scale (initializer None: the scope's, else glorot's)."""
    from ._graph import as_shape
    from . import _variables
    shape = as_shape(shape)
    if not shape.is_fully_defined() or shape.ndims < 1:
        raise ValueError("a partitioned variable (%s) needs a fully defined shape with a first "
                         "axis, not %s" % (full, shape))
    dims = shape.as_list()
    parts = split(shape=shape, dtype=dtype)
    n = int(parts[0])
    if n < 1 or any(int(p) != 1 for p in parts[1:]):
        raise ValueError("the partitioner of %s asks for %s: psgraph splits axis 0 only, into "
                         "at least one shard" % (full, list(parts)))
    rows, extra = divmod(dims[0], n)
    if initializer is None:
        initializer = _variables.get_variable_scope().initializer
    if initializer is None or callable(initializer):
        initializer = _of_whole(initializer, dims, dtype)
    variables = []
    for i in range(n):
        sub = [rows + (1 if i < extra else 0)] + dims[1:]
        variables.append(get_variable("%s/part_%d" % (name, i), shape=sub, dtype=dtype,
                                      initializer=initializer, **kwargs))
    return PartitionedVariable(full, shape, dtype, variables)


_PART = re.compile(r"^(.*)/part_(\d+)(/.*)?$")


def layout_moves(in_checkpoint, variables):
    """How each variable missing from a checkpoint comes from it in another layout, as
    {variable name: ("concat", [part names]) | ("slice", whole name, first row)}: a whole
    variable from the checkpoint's row shards NAME/part_i (and a slot NAME/part_i/SLOT),
    a shard from the whole (its first row: the rows of the shards before it).
    in_checkpoint: the checkpoint's names; variables: {name: shape} of the graph's."""
    groups = {}
    for n in in_checkpoint:
        m = _PART.match(n)
        if m:
            groups.setdefault(m.group(1) + (m.group(3) or ""), {})[int(m.group(2))] = n
    moves = {}
    for name, shape in variables.items():
        if name in in_checkpoint:
            continue
        parts = groups.get(name)
        if parts and sorted(parts) == list(range(len(parts))):
            moves[name] = ("concat", [parts[i] for i in range(len(parts))])
            continue
        m = _PART.match(name)
        whole = m and m.group(1) + (m.group(3) or "")
        if m and whole in in_checkpoint:
            before = ["%s/part_%d%s" % (m.group(1), i, m.group(3) or "")
                      for i in range(int(m.group(2)))]
            if all(b in variables for b in before):
                moves[name] = ("slice", whole, sum(int(variables[b][0]) for b in before))
    return moves


def value_of(move, read, shape, name, path):
    """The value of variable `name` (shape) by a layout_moves move, read(name) reading the
    checkpoint at path."""
    import numpy as np
    if move[0] == "concat":
        value = np.concatenate([read(p) for p in move[1]], 0)
    else:
        value = read(move[1])[move[2]:move[2] + int(shape[0])]
    if list(value.shape) != [int(d) for d in shape]:
        raise ValueError("%s: variable %s is %s, but its %s in the checkpoint make %s"
                         % (path, name, list(shape), "shards" if move[0] == "concat" else
                            "rows of " + move[1], list(value.shape)))
    return value
