/* `psgraph launch --slurm`: inside a Slurm allocation, the tasks' nodes and ports from the
 * allocation's environment (cli/slurm_alloc.c places them as TensorFlow's
 * SlurmClusterResolver), and the srun command line that starts one task as a job step on its
 * node, with the same remote script as ssh (keys over its stdin, no orphan). Not the
 * supervision (cli/launch_cmd.c). */
#include "cli/commands.h"
#include "cli/slurm_alloc.h"
#include "psgraph/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int psg_launch_slurm_place(psg_launch_t *o) {
    const char *job = getenv("SLURM_JOB_ID"), *nodes = getenv("SLURM_JOB_NODELIST");
    const char *tpn = getenv("SLURM_TASKS_PER_NODE"), *ntasks = getenv("SLURM_NTASKS");
    if (!job || !nodes || !tpn) {
        fprintf(stderr,
                "psgraph launch: --slurm runs inside a Slurm allocation (an sbatch script, "
                "or salloc's shell): no %s here\n",
                !job     ? "SLURM_JOB_ID"
                : !nodes ? "SLURM_JOB_NODELIST"
                         : "SLURM_TASKS_PER_NODE");
        return -1;
    }
    /* under srun every task of the step would start a whole cluster of its own */
    const char *step_tasks = getenv("SLURM_STEP_NUM_TASKS");
    if (getenv("SLURM_STEP_ID") && step_tasks && atoi(step_tasks) > 1) {
        fprintf(
            stderr,
            "psgraph launch: --slurm starts the tasks itself (a job step each): run it once, in "
            "the batch script or salloc's shell, not under srun (this is task %s of %s of "
            "step %s)\n",
            getenv("SLURM_PROCID") ? getenv("SLURM_PROCID") : "?", step_tasks,
            getenv("SLURM_STEP_ID"));
        return -1;
    }
    psg_slurm_place_t p;
    if (psg_slurm_place(nodes, tpn, ntasks ? atoi(ntasks) : 0, o->ps, o->workers, o->port_base,
                        &p) < 0) {
        fprintf(stderr, "psgraph launch: --slurm in job %s: %s\n", job, psg_error_message());
        return -1;
    }
    o->task_hosts = p.host;
    o->task_ports = p.port;
    o->task_slots = p.slot;
    o->node_slots = p.node_slots;
    return 0;
}

void psg_launch_slurm_free(psg_launch_t *o) {
    psg_slurm_place_t p = {.n = o->ps + o->workers,
                           .host = o->task_hosts,
                           .port = o->task_ports,
                           .slot = o->task_slots,
                           .node_slots = o->node_slots};
    psg_slurm_place_free(&p);
    o->task_hosts = NULL;
    o->task_ports = o->task_slots = o->node_slots = NULL;
}

/* The remote shell's part that gives the task its share of its node's GPUs, as
 * SlurmClusterResolver: the step's GPUs (SLURM_STEP_GPUS, else CUDA_VISIBLE_DEVICES as Slurm
 * set it on the node), k = their count / the node's slots, the slot's k of them; nothing
 * when the node shows no GPU. */
static void gpu_share(int slot, int node_slots, char *out, size_t size) {
    snprintf(out, size,
             "g=${SLURM_STEP_GPUS:-${CUDA_VISIBLE_DEVICES:-}}; if [ -n \"$g\" ]; then IFS=,; "
             "set -- $g; unset IFS; k=$(($# / %d)); i=0; s=; for x in \"$@\"; do "
             "if [ $i -ge $((%d * k)) ] && [ $i -lt $((%d * k + k)) ]; then s=${s:+$s,}$x; fi; "
             "i=$((i + 1)); done; CUDA_VISIBLE_DEVICES=$s; export CUDA_VISIBLE_DEVICES; fi; ",
             node_slots > 0 ? node_slots : 1, slot, slot);
}

char **psg_launch_srun_argv(const psg_launch_t *o, int i, const char *cfg, char **cmd) {
    const char *host = o->task_hosts[i];
    char **argv = calloc(16, sizeof *argv);
    if (!argv) return NULL;
    char nodelist[600], name[64], pre[700];
    snprintf(nodelist, sizeof nodelist, "--nodelist=%s", host);
    snprintf(name, sizeof name, "--job-name=%s%d", i < o->ps ? "ps" : "worker",
             i < o->ps ? i : i - o->ps);
    gpu_share(o->task_slots ? o->task_slots[i] : 0, o->node_slots ? o->node_slots[i] : 1, pre,
              sizeof pre);
    /* one task on its node; --overlap: the steps share the allocation's CPUs, memory and
       GPUs instead of waiting for each other (each task's GPUs: the share above) */
    const char *fixed[] = {"srun",      "--nodes=1", "--ntasks=1",  nodelist,
                           "--overlap", name,        "--input=all", "--kill-on-bad-exit=1",
                           "--",        "/bin/sh",   "-c"};
    int k = 0;
    bool ok = true;
    for (size_t j = 0; j < sizeof fixed / sizeof fixed[0]; j++)
        ok &= (argv[k++] = strdup(fixed[j])) != NULL;
    ok &= (argv[k++] = psg_launch_remote_script(o, host, cfg, cmd, pre)) != NULL;
    if (!ok) psg_launch_argv_free(&argv);
    return argv;
}
