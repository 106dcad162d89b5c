"""psgraph's data sets and batch iterators from Python (psgraph/data.h): Fashion-MNIST read
from its IDX files by the C reader, batches drawn in the order `psgraph train` draws them
(shuffled by seed, per epoch), as numpy arrays (no copy) ready to feed. Data loading, not
a model: scripts may use any reader."""
from . import _psgraph

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


class Dataset:
    def __init__(self, cap):
        self._cap = cap
        self.size, self.example_shape, self.num_classes = _psgraph.dataset_info(cap)

    def __len__(self):
        return self.size

    def slice(self, start, count):
        """(images float32 [count, 28, 28, 1] in [0, 1], labels int32 [count]) in order."""
        return _psgraph.dataset_slice(self._cap, int(start), int(count))

    def arrays(self):
        return self.slice(0, self.size)

    def batches(self, batch_size, shuffle=True, seed=1, drop_remainder=True, num_epochs=0, prefetch=2,
                start_batch=0):
        """Batches (images, labels): psgraph train's order for (batch_size, seed); num_epochs 0:
        forever."""
        return Batches(self, batch_size, shuffle, seed, drop_remainder, num_epochs, prefetch, start_batch)


class Batches:
    def __init__(self, ds, batch_size, shuffle, seed, drop_remainder, num_epochs, prefetch, start_batch):
        self._ds = ds
        self._it = _psgraph.batch_iter(ds._cap, int(batch_size), bool(shuffle), int(seed),
                                       bool(drop_remainder), int(num_epochs), int(prefetch), int(start_batch))

    @property
    def batches_per_epoch(self):
        return _psgraph.batch_info(self._it)[0]

    @property
    def epoch(self):
        return _psgraph.batch_info(self._it)[1]

    def __iter__(self):
        return self

    def __next__(self):
        b = _psgraph.batch_next(self._it)
        if b is None:
            raise StopIteration
        return b


def fashion_mnist(train=True, data_dir=None):
    """Fashion-MNIST's train (60000) or test (10000) split (psg_dataset_fashion_mnist)."""
    return Dataset(_psgraph.fashion_mnist(data_dir, bool(train)))
