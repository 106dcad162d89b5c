"""The devices this process can run ops on, as TF 1.x reports them: tf.test.is_gpu_available,
tf.test.gpu_device_name, tf.config.list_physical_devices. The C library decides (psg_gpu_count:
the CUDA module loaded and a GPU found); place ops with tf.device('/gpu:0')."""
import collections

from . import _psgraph

PhysicalDevice = collections.namedtuple("PhysicalDevice", ["name", "device_type"])


def gpu_status():
    """One line: the GPUs found, or why there are none (no CUDA module, no driver...)."""
    return _psgraph.gpu_status()


def is_gpu_available(cuda_only=False, min_cuda_compute_capability=None):
    del cuda_only, min_cuda_compute_capability  # every psgraph GPU is a CUDA one
    return _psgraph.gpu_count() > 0


def is_built_with_cuda():
    """The library has its CUDA backend and could load it (a GPU need not be there)."""
    status = _psgraph.gpu_status()
    return not status.startswith("built without CUDA") and "could not be loaded" not in status


def gpu_device_name():
    return "/device:GPU:0" if _psgraph.gpu_count() > 0 else ""


def list_physical_devices(device_type=None):
    devices = [PhysicalDevice("/physical_device:CPU:0", "CPU")]
    devices += [PhysicalDevice("/physical_device:GPU:%d" % k, "GPU") for k in range(_psgraph.gpu_count())]
    return [d for d in devices if device_type is None or d.device_type == device_type.upper()]
