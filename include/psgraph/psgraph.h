/* psgraph's public C API: include this one header. */
#ifndef PSGRAPH_H
#define PSGRAPH_H

#include "psgraph/error.h"
#include "psgraph/tensor.h"
#include "psgraph/threadpool.h"
#include "psgraph/graph.h"
#include "psgraph/op.h"
#include "psgraph/resource.h"
#include "psgraph/autodiff.h"
#include "psgraph/session.h"
#include "psgraph/ops_array.h"
#include "psgraph/serialize.h"
#include "psgraph/device_name.h"
#include "psgraph/rendezvous.h"
#include "psgraph/placement.h"
#include "psgraph/partition.h"
#include "psgraph/msgpack_check.h"
#include "psgraph/ops_math.h"
#include "psgraph/ops_nn.h"
#include "psgraph/optimizer.h"
#include "psgraph/data.h"
#include "psgraph/models.h"
#include "psgraph/inception3.h"
#include "psgraph/simulate.h"
#include "psgraph/tfrecord.h"
#include "psgraph/imagenet.h"
#include "psgraph/trainer.h"
#include "psgraph/cluster.h"
#include "psgraph/task_server.h"
#include "psgraph/dist_session.h"

#endif
