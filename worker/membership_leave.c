/* A worker's clean leave on SIGTERM (worker/membership_leave.h): the signal's flag, the word
 * to the chief. The chief's side is worker/membership.c (ask_left). */
#include "worker/membership_leave.h"

#include "ps/client.h"
#include "psgraph/device_name.h"
#include "psgraph/error.h"
#include "psgraph/wire.h"

#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

/* How long the chief's task server may take to answer: it answers between two steps'
 * requests; a chief gone does not hold the pod past its grace. */
#define LEAVE_TELL_MS 2000

static volatile sig_atomic_t leave_signal;

static void on_term(int sig) {
    if (leave_signal) { /* asked twice: no clean leave wanted */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    leave_signal = sig;
    alarm(PSG_LEAVE_GRACE_S);
}

void psg_membership_leave_arm(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sa.sa_flags = SA_RESTART; /* the wire's polls see EINTR and poll again */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

int psg_membership_leave_asked(void) {
    return leave_signal;
}

int psg_membership_leave_tell(const psg_cluster_t *cl, const char *self) {
    const char *job = psg_cluster_num_tasks(cl, "chief") > 0 ? "chief" : "worker";
    const char *addr = psg_cluster_address(cl, job, 0);
    char chief[PSG_DEVICE_NAME_MAX];
    psg_device_name(job, 0, NULL, chief, sizeof chief);
    if (!addr) return psg_error_set("telling the chief %s this worker leaves: no address", chief);
    int peer = psg_cluster_peer_timeout_ms(cl);
    if (peer <= 0) peer = PSG_WIRE_PEER_TIMEOUT_MS;
    int64_t wait = peer < LEAVE_TELL_MS ? peer : LEAVE_TELL_MS;
    psg_ts_client_t *c = psg_ts_client_new(chief, addr, wait, peer, psg_cluster_keys(cl));
    if (!c) return psg_error_wrap("telling the chief %s this worker leaves", chief);
    psg_req_t jd = {.type = PSG_REQ_JOB_DONE, .u.worker = self};
    psg_rep_t rep;
    psg_msg_t *r = psg_ts_call(c, &jd, &rep, wait);
    bool told = r != NULL;
    psg_msg_destroy(&r);
    psg_ts_client_destroy(&c);
    return told ? 0 : psg_error_wrap("telling the chief %s this worker leaves", chief);
}
