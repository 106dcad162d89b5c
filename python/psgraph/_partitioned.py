"""Partitioned variables as TF 1.x's (tf.get_variable(..., partitioner=...)): a variable
split along its first axis into shards "NAME/part_0", "NAME/part_1", ... (TensorFlow's names
and row split: the first dim0 % n shards one row more), each a variable of its own, so that
under tf.train.replica_device_setter each lands on a ps task of its own. Used as a tensor,
it is the concatenation of its shards' reads (the gradient flows back to each shard);
tf.nn.embedding_lookup takes it as its list of shards. The partitioners:
fixed_size_partitioner and min_max_variable_partitioner."""
import math


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


def make(get_variable, full, name, shape, dtype, split, **kwargs):
    """The shards of `name` (full: its scoped name) made with get_variable (the caller's;
    kwargs tell it not to partition them), split as split(shape, dtype) says."""
    from ._graph import as_shape
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
    variables = []
    for i in range(n):
        sub = [rows + (1 if i < extra else 0)] + dims[1:]
        variables.append(get_variable("%s/part_%d" % (name, i), shape=sub, dtype=dtype,
                                      **kwargs))
    return PartitionedVariable(full, shape, dtype, variables)
