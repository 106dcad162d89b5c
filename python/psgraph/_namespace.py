"""Namespaces with TF 1.x's names: a module whose missing attribute raises AttributeError
naming it ("psgraph does not have tf.nn.ctc_loss yet"), so that nothing falls back
silently."""
import sys
import types


class Namespace(types.ModuleType):
    def __init__(self, module_name, tf_name, members):
        super().__init__(module_name)
        self.__dict__.update(members)
        self.__dict__["_tf_name"] = tf_name

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise AttributeError("psgraph does not have %s.%s yet" % (self._tf_name, name))

    def __dir__(self):
        return sorted(k for k in self.__dict__ if not k.startswith("_"))


def make(parent, short, members):
    """The namespace parent.short (e.g. psgraph.compat.v1.nn, TF's tf.nn), registered in
    sys.modules so `from psgraph.compat.v1 import nn` works too."""
    module_name = parent + "." + short
    tf_name = "tf." + short
    ns = Namespace(module_name, tf_name, members)
    sys.modules[module_name] = ns
    return ns
