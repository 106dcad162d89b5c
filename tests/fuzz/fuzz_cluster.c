/* libFuzzer: the cluster spec (TF_CONFIG JSON, net/cluster.c) over the JSON reader
 * (core/json.c): a launch script's typo or a hostile environment must be an error. */
#include "fuzz_util.h"
#include "core/json.h"
#include "psgraph/cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = psg_fuzz_str(data, size);
    psg_json_t *j = psg_json_parse(s);
    psg_json_free(j);
    psg_cluster_t *c = psg_cluster_parse(s, "fuzz");
    psg_cluster_destroy(&c);
    free(s);
    return 0;
}
