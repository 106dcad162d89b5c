"""TensorFlow 1.x's API over psgraph: `import psgraph.compat.v1 as tf` in place of
`import tensorflow.compat.v1 as tf`. A name outside psgraph's surface raises AttributeError
naming it (docs/python.md lists the surface)."""
import logging as _pylogging

from psgraph import _array_ops, _dtypes, _graph, _layers, _math_ops, _nn, _ops, _session
from psgraph import _dist, _monitored, _partitioned, _strategy, _summary, _supervisor, _train
from psgraph import _devices, _variables
from psgraph import errors as _errors
from psgraph._namespace import make as _make

__version__ = VERSION = "1.15.psgraph"
GIT_VERSION = "psgraph"

# ---- graphs and sessions ----
Graph = _graph.Graph
Operation = _graph.Operation
Tensor = _graph.Tensor
TensorShape = _graph.TensorShape
Dimension = _graph.Dimension
GraphKeys = _graph.GraphKeys
get_default_graph = _graph.get_default_graph
reset_default_graph = _graph.reset_default_graph
get_default_session = _graph.get_default_session
convert_to_tensor = _graph.convert_to_tensor
Session = _session.Session
InteractiveSession = _session.InteractiveSession
ConfigProto = _session.ConfigProto
GPUOptions = _session.GPUOptions
RunOptions = _session.RunOptions
RunMetadata = _session.RunMetadata

# ---- dtypes ----
DType = _dtypes.DType
as_dtype = _dtypes.as_dtype
float16, bfloat16, float32, float64 = _dtypes.float16, _dtypes.bfloat16, _dtypes.float32, _dtypes.float64
half, double = _dtypes.float16, _dtypes.float64
int32, int64, uint8 = _dtypes.int32, _dtypes.int64, _dtypes.uint8
resource = _dtypes.resource  # a variable's handle (an update op's input)
bool = _dtypes.bool_  # noqa: A001 - TF's name

# ---- scopes, devices, control ----
name_scope = _ops.name_scope
device = _ops.device
control_dependencies = _ops.control_dependencies
group = _ops.group
no_op = _ops.no_op
gradients = _ops.gradients
assign = _ops.assign
assign_add = _ops.assign_add
assign_sub = _ops.assign_sub
set_random_seed = _ops.set_random_seed
get_collection = _ops.get_collection
get_collection_ref = _ops.get_collection_ref
add_to_collection = _ops.add_to_collection
add_to_collections = _ops.add_to_collections
disable_v2_behavior = _ops.disable_v2_behavior
disable_eager_execution = _ops.disable_eager_execution
enable_eager_execution = _ops.enable_eager_execution
executing_eagerly = _ops.executing_eagerly

# ---- variables ----
Variable = _variables.Variable
get_variable = _variables.get_variable
variable_scope = _variables.variable_scope
get_variable_scope = _variables.get_variable_scope
VariableScope = _variables.VariableScope
AUTO_REUSE = _variables.AUTO_REUSE
global_variables = _variables.global_variables
all_variables = _variables.all_variables
trainable_variables = _variables.trainable_variables
local_variables = _variables.local_variables
model_variables = _variables.model_variables
moving_average_variables = _variables.moving_average_variables
global_variables_initializer = _variables.global_variables_initializer
initialize_all_variables = _variables.initialize_all_variables
local_variables_initializer = _variables.local_variables_initializer
variables_initializer = _variables.variables_initializer
zeros_initializer = _variables.zeros_initializer
ones_initializer = _variables.ones_initializer
constant_initializer = _variables.constant_initializer
random_normal_initializer = _variables.random_normal_initializer
truncated_normal_initializer = _variables.truncated_normal_initializer
random_uniform_initializer = _variables.random_uniform_initializer
glorot_uniform_initializer = _variables.glorot_uniform_initializer
glorot_normal_initializer = _variables.glorot_normal_initializer
variance_scaling_initializer = _variables.variance_scaling_initializer
fixed_size_partitioner = _partitioned.fixed_size_partitioner
min_max_variable_partitioner = _partitioned.min_max_variable_partitioner
variable_axis_size_partitioner = _partitioned.variable_axis_size_partitioner
PartitionedVariable = _partitioned.PartitionedVariable

# ---- arrays ----
constant = _array_ops.constant
placeholder = _array_ops.placeholder
placeholder_with_default = _array_ops.placeholder_with_default
zeros = _array_ops.zeros
ones = _array_ops.ones
fill = _array_ops.fill
zeros_like = _array_ops.zeros_like
ones_like = _array_ops.ones_like
random_normal = _array_ops.random_normal
truncated_normal = _array_ops.truncated_normal
random_uniform = _array_ops.random_uniform
identity = _array_ops.identity
stop_gradient = _array_ops.stop_gradient
reshape = _array_ops.reshape
expand_dims = _array_ops.expand_dims
squeeze = _array_ops.squeeze
concat = _array_ops.concat
shape = _array_ops.shape
cast = _array_ops.cast
to_float = _array_ops.to_float
to_int32 = _array_ops.to_int32
to_int64 = _array_ops.to_int64
one_hot = _array_ops.one_hot
gather = _array_ops.gather
newaxis = None

# ---- math ----
add = _math_ops.add
subtract = _math_ops.subtract
multiply = _math_ops.multiply
divide = _math_ops.divide
truediv = _math_ops.truediv
div = _math_ops.div
negative = _math_ops.negative
square = _math_ops.square
sqrt = _math_ops.sqrt
exp = _math_ops.exp
log = _math_ops.log
pow = _math_ops.pow  # noqa: A001
abs = _math_ops.abs  # noqa: A001
maximum = _math_ops.maximum
minimum = _math_ops.minimum
clip_by_value = _math_ops.clip_by_value
sigmoid = _math_ops.sigmoid
tanh = _math_ops.tanh
matmul = _math_ops.matmul
add_n = _math_ops.add_n
reduce_sum = _math_ops.reduce_sum
reduce_mean = _math_ops.reduce_mean
reduce_max = _math_ops.reduce_max
argmax = _math_ops.argmax
equal = _math_ops.equal
not_equal = _math_ops.not_equal
greater = _math_ops.greater
greater_equal = _math_ops.greater_equal
less = _math_ops.less
less_equal = _math_ops.less_equal

_here = __name__

nn = _make(_here, "nn", dict(
    relu=_nn.relu, sigmoid=_nn.sigmoid, tanh=_nn.tanh, leaky_relu=_nn.leaky_relu,
    softmax=_nn.softmax, log_softmax=_nn.log_softmax,
    sparse_softmax_cross_entropy_with_logits=_nn.sparse_softmax_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits_v2=_nn.softmax_cross_entropy_with_logits_v2,
    softmax_cross_entropy_with_logits=_nn.softmax_cross_entropy_with_logits,
    sigmoid_cross_entropy_with_logits=_nn.sigmoid_cross_entropy_with_logits,
    conv2d=_nn.conv2d, max_pool=_nn.max_pool, avg_pool=_nn.avg_pool, bias_add=_nn.bias_add,
    dropout=_nn.dropout, embedding_lookup=_nn.embedding_lookup, l2_loss=_nn.l2_loss,
    xw_plus_b=_nn.xw_plus_b, moments=_nn.moments))

layers = _make(_here, "layers", dict(
    dense=_layers.dense, conv2d=_layers.conv2d, max_pooling2d=_layers.max_pooling2d,
    average_pooling2d=_layers.average_pooling2d, flatten=_layers.flatten, dropout=_layers.dropout,
    batch_normalization=_layers.batch_normalization))

losses = _make(_here, "losses", dict(
    sparse_softmax_cross_entropy=_layers.sparse_softmax_cross_entropy,
    softmax_cross_entropy=_layers.softmax_cross_entropy,
    sigmoid_cross_entropy=_layers.sigmoid_cross_entropy,
    mean_squared_error=_layers.mean_squared_error, add_loss=_layers.add_loss,
    get_losses=_layers.get_losses, get_regularization_loss=_layers.get_regularization_loss,
    get_regularization_losses=_layers.get_regularization_losses,
    get_total_loss=_layers.get_total_loss, Reduction=_layers.Reduction))

test = _make(_here, "test", dict(
    is_gpu_available=_devices.is_gpu_available, is_built_with_cuda=_devices.is_built_with_cuda,
    gpu_device_name=_devices.gpu_device_name))

config = _make(_here, "config", dict(
    list_physical_devices=_devices.list_physical_devices,
    experimental=_make(_here + ".config", "experimental", dict(
        list_physical_devices=_devices.list_physical_devices))))

train = _make(_here, "train", dict(
    Optimizer=_train.Optimizer, GradientDescentOptimizer=_train.GradientDescentOptimizer,
    MomentumOptimizer=_train.MomentumOptimizer, AdamOptimizer=_train.AdamOptimizer,
    RMSPropOptimizer=_train.RMSPropOptimizer, AdagradOptimizer=_train.AdagradOptimizer,
    FtrlOptimizer=_train.FtrlOptimizer, get_or_create_global_step=_train.get_or_create_global_step,
    create_global_step=_train.create_global_step, get_global_step=_train.get_global_step,
    global_step=_train.global_step, exponential_decay=_train.exponential_decay,
    piecewise_constant=_train.piecewise_constant,
    ExponentialMovingAverage=_train.ExponentialMovingAverage, Saver=_train.Saver,
    latest_checkpoint=_train.latest_checkpoint, list_variables=_train.list_variables,
    load_variable=_train.load_variable,
    # the cluster (psgraph/_dist.py) and the monitored session (psgraph/_monitored.py)
    ClusterSpec=_dist.ClusterSpec, Server=_dist.Server,
    replica_device_setter=_dist.replica_device_setter,
    GreedyLoadBalancingStrategy=_dist.GreedyLoadBalancingStrategy,
    byte_size_load_fn=_dist.byte_size_load_fn,
    MonitoredTrainingSession=_monitored.MonitoredTrainingSession,
    MonitoredSession=_monitored.MonitoredSession, Scaffold=_monitored.Scaffold,
    SessionRunHook=_monitored.SessionRunHook, SessionRunArgs=_monitored.SessionRunArgs,
    SessionRunContext=_monitored.SessionRunContext, SessionRunValues=_monitored.SessionRunValues,
    StopAtStepHook=_monitored.StopAtStepHook, LoggingTensorHook=_monitored.LoggingTensorHook,
    CheckpointSaverHook=_monitored.CheckpointSaverHook,
    CheckpointSaverListener=_monitored.CheckpointSaverListener,
    SummarySaverHook=_monitored.SummarySaverHook, StepCounterHook=_monitored.StepCounterHook,
    SyncReplicasOptimizer=_strategy.SyncReplicasOptimizer, Supervisor=_supervisor.Supervisor,
    Coordinator=_supervisor.Coordinator))

distribute = _make(_here, "distribute", dict(Server=_dist.Server, ClusterSpec=_dist.ClusterSpec))
distribute.cluster_resolver = _make(_here + ".distribute", "cluster_resolver", dict(
    TFConfigClusterResolver=_dist.TFConfigClusterResolver))

summary = _make(_here, "summary", dict(
    scalar=_summary.scalar, histogram=_summary.histogram, merge=_summary.merge,
    merge_all=_summary.merge_all, FileWriter=_summary.FileWriter, Summary=_summary.Summary))
Summary = _summary.Summary

from psgraph import _app  # noqa: E402

flags = _make(_here, "flags", dict(
    FLAGS=_app.FLAGS, DEFINE_string=_app.DEFINE_string, DEFINE_integer=_app.DEFINE_integer,
    DEFINE_float=_app.DEFINE_float, DEFINE_boolean=_app.DEFINE_boolean, DEFINE_bool=_app.DEFINE_bool,
    DEFINE_list=_app.DEFINE_list, DEFINE_enum=_app.DEFINE_enum))
app = _make(_here, "app", dict(run=_app.run, flags=flags))

initializers = _make(_here, "initializers", dict(
    zeros=_variables.zeros_initializer, ones=_variables.ones_initializer,
    constant=_variables.constant_initializer, random_normal=_variables.random_normal_initializer,
    truncated_normal=_variables.truncated_normal_initializer,
    random_uniform=_variables.random_uniform_initializer,
    glorot_uniform=_variables.glorot_uniform_initializer,
    glorot_normal=_variables.glorot_normal_initializer,
    variance_scaling=_variables.variance_scaling_initializer, he_normal=_variables.he_normal,
    he_uniform=_variables.he_uniform, global_variables=global_variables_initializer,
    variables=variables_initializer))

errors = _make(_here, "errors", {k: getattr(_errors, k) for k in dir(_errors)
                                 if k.endswith("Error") or k.isupper() or k.endswith("_type")
                                 or k.endswith("_code")})

dtypes = _make(_here, "dtypes", dict(
    DType=DType, as_dtype=as_dtype, float16=float16, bfloat16=bfloat16, float32=float32,
    float64=float64, int32=int32, int64=int64, uint8=uint8, bool=bool))

_log = _pylogging.getLogger("tensorflow")
if not _log.handlers:
    _h = _pylogging.StreamHandler()
    _h.setFormatter(_pylogging.Formatter("%(levelname)s:tensorflow:%(message)s"))
    _log.addHandler(_h)
    _log.setLevel(_pylogging.WARNING)
logging = _make(_here, "logging", dict(
    DEBUG=_pylogging.DEBUG, INFO=_pylogging.INFO, WARN=_pylogging.WARNING, ERROR=_pylogging.ERROR,
    FATAL=_pylogging.CRITICAL, set_verbosity=_log.setLevel, get_verbosity=_log.getEffectiveLevel,
    debug=_log.debug, info=_log.info, warn=_log.warning, warning=_log.warning, error=_log.error,
    fatal=_log.critical))

random = _make(_here, "random", dict(
    set_random_seed=set_random_seed, normal=random_normal, truncated_normal=truncated_normal,
    uniform=random_uniform))

math = _make(_here, "math", dict(
    add=add, subtract=subtract, multiply=multiply, divide=divide, truediv=truediv,
    negative=negative, square=square, sqrt=sqrt, exp=exp, log=log, pow=pow, abs=abs,
    maximum=maximum, minimum=minimum, sigmoid=sigmoid, tanh=tanh, add_n=add_n,
    reduce_sum=reduce_sum, reduce_mean=reduce_mean, reduce_max=reduce_max, argmax=argmax,
    equal=equal, not_equal=not_equal, greater=greater, greater_equal=greater_equal, less=less,
    less_equal=less_equal))

compat = _make(_here, "compat", {})


def __getattr__(name):
    if name == "v1":
        raise AttributeError("psgraph does not have tf.v1 yet")
    raise AttributeError("psgraph does not have tf.%s yet" % name)


compat.__dict__["v1"] = __import__("sys").modules[__name__]
