/* The cluster's CURVE keys (psgraph/curve.h): key folders in czmq's certificate format,
 * written and loaded with their permissions checked, the allow-list, the rule of when a task
 * may listen without keys, and the keys set on a socket. Not the ZAP handler nor the
 * handshake monitor (curve_guard.c). */
#include "net/curve_internal.h"

#include "psgraph/error.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <czmq.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MAX_ALLOWED 4096

struct psg_curve_keys {
    char dir[1024];
    char own_public_txt[41];
    uint8_t server_public[PSG_CURVE_KEY_BYTES];
    uint8_t server_secret[PSG_CURVE_KEY_BYTES];
    bool has_server_secret;
    bool k8s; /* a Kubernetes Secret's folder (check_dir) */
    uint8_t own_public[PSG_CURVE_KEY_BYTES], own_secret[PSG_CURVE_KEY_BYTES];
    int nallowed;
    uint8_t (*allowed)[PSG_CURVE_KEY_BYTES];
    char (*names)[PSG_CURVE_NAME_MAX]; /* each allowed key's identity (psg_curve_keys_name) */
};

/* ---- the log ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static psg_net_log_fn log_fn;
static void *log_ctx;

void psg_net_set_log(psg_net_log_fn fn, void *ctx) {
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_ctx = ctx;
    pthread_mutex_unlock(&log_lock);
}

void psg_net_log(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_lock);
    if (log_fn) log_fn(log_ctx, line);
    pthread_mutex_unlock(&log_lock);
}

/* ---- folders and files ---- */

/* A folder Kubernetes made of a Secret volume: every file a link through "..data" to a
 * "..TIMESTAMP" folder the kubelet swaps atomically; the folder itself is the kubelet's (root,
 * 1777 as a tmpfs), mounted read-only into the container, which is what keeps it ours.
 * 1 when dir is one, 0 when it is not laid out so, -1 (error set) when it is but writable. */
static int k8s_secret_dir(const char *dir) {
    char path[1100], target[256];
    snprintf(path, sizeof path, "%s/..data", dir);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 3) return 0;
    target[n] = 0;
    struct stat st;
    if (strncmp(target, "..", 2) || strchr(target, '/') || stat(path, &st) < 0 ||
        !S_ISDIR(st.st_mode))
        return 0;
    struct statvfs fs;
    if (statvfs(dir, &fs) == 0 && (fs.f_flag & ST_RDONLY)) return 1;
    return psg_error_set(
        "key folder %s is laid out as a Kubernetes Secret (..data -> %s) but is not on a "
        "read-only mount, as Kubernetes mounts a Secret; anyone who can write it could add "
        "a key to the allow-list",
        dir, target);
}

/* A key folder: ours, a folder, nothing for group or others; or a Kubernetes Secret's
 * (*k8s set). */
static int check_dir(const char *dir, bool *k8s) {
    struct stat st;
    *k8s = false;
    if (stat(dir, &st) < 0) return psg_error_set("key folder %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return psg_error_set("key folder %s: not a folder", dir);
    if (st.st_uid != geteuid() || (st.st_mode & 077)) {
        int rc = k8s_secret_dir(dir);
        if (rc < 0) return -1;
        *k8s = rc == 1;
        if (*k8s) return 0;
    }
    if (st.st_uid != geteuid())
        return psg_error_set("key folder %s belongs to uid %d, not to this user (uid %d)", dir,
                             (int)st.st_uid, (int)geteuid());
    if (st.st_mode & 077)
        return psg_error_set("key folder %s is open to other users (mode %04o); it must be 0700: "
                             "chmod 700 %s",
                             dir, (unsigned)(st.st_mode & 07777), dir);
    return 0;
}

static bool valid_name(const char *name) {
    if (!*name || strlen(name) >= PSG_CURVE_NAME_MAX) return false;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.') return false;
    return name[0] != '.';
}

int psg_curve_keygen(const char *dir, const char *name) {
    if (!name) name = PSG_CURVE_CLUSTER;
    if (!valid_name(name))
        return psg_error_set("key name \"%.64s\": letters, digits, '_', '-' and '.' only", name);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return psg_error_set("key folder %s: %s", dir, strerror(errno));
    bool k8s;
    if (check_dir(dir, &k8s) < 0) return -1;
    char pub[1200], sec[1220];
    snprintf(pub, sizeof pub, "%s/%s.key", dir, name);
    snprintf(sec, sizeof sec, "%s/%s.key_secret", dir, name);
    if (access(pub, F_OK) == 0 || access(sec, F_OK) == 0)
        return psg_error_set("%s exists: keys are never overwritten (remove %s and %s first, then "
                             "give every task the new keys)",
                             access(sec, F_OK) == 0 ? sec : pub, pub, sec);
    zcert_t *cert = zcert_new();
    if (!cert) return psg_error_set("cannot make a key pair (is libzmq built with CURVE?)");
    zcert_set_meta(cert, "name", "%s", name);
    zcert_set_meta(cert, "made-by", "psgraph keygen");
    int rc = zcert_save(cert, pub);
    zcert_destroy(&cert);
    /* the folder is 0700 already: nobody else could read the file meanwhile */
    if (rc < 0 || chmod(sec, 0600) < 0 || chmod(pub, 0644) < 0) {
        int e = errno;
        unlink(pub);
        unlink(sec);
        return psg_error_set("cannot write %s: %s", sec, strerror(e));
    }
    return 0;
}

/* A secret file: a regular file, nothing for group or others; in a Kubernetes Secret's
 * folder root's (or ours), and the group may read (the pod's fsGroup: the kubelet makes
 * it 0440). */
static int check_secret(const char *path, bool k8s) {
    struct stat st;
    if (stat(path, &st) < 0) return psg_error_set("%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return psg_error_set("%s: not a regular file", path);
    if (k8s && st.st_uid != 0 && st.st_uid != geteuid())
        return psg_error_set(
            "%s belongs to uid %d: a Kubernetes Secret's files are root's (the kubelet's)", path,
            (int)st.st_uid);
    if (k8s && (st.st_mode & 037))
        return psg_error_set(
            "%s is open to other users (mode %04o); give its Secret volume defaultMode "
            "0400 (psgraph launch --k8s does)",
            path, (unsigned)(st.st_mode & 07777));
    if (!k8s && (st.st_mode & 077))
        return psg_error_set(
            "%s is readable by other users (mode %04o); it must be 0600: chmod 600 %s", path,
            (unsigned)(st.st_mode & 07777), path);
    return 0;
}

/* Loads a certificate: public key, and secret key when want_secret. */
static int load_cert(const char *path, uint8_t *pub, uint8_t *secret) {
    zcert_t *cert = zcert_load(path);
    if (!cert)
        return psg_error_set(
            "%s: not a czmq certificate (missing, or no curve/public-key of 40 Z85 "
            "characters)",
            path);
    memcpy(pub, zcert_public_key(cert), PSG_CURVE_KEY_BYTES);
    int rc = 0;
    if (secret) {
        static const uint8_t zero[PSG_CURVE_KEY_BYTES];
        memcpy(secret, zcert_secret_key(cert), PSG_CURVE_KEY_BYTES);
        if (!memcmp(secret, zero, sizeof zero))
            rc = psg_error_set("%s_secret: no curve/secret-key in it", path);
    }
    zcert_destroy(&cert);
    return rc;
}

static int load_allow_list(psg_curve_keys_t *k) {
    DIR *d = opendir(k->dir);
    if (!d) return psg_error_set("key folder %s: %s", k->dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n <= 4 || strcmp(e->d_name + n - 4, ".key") || e->d_name[0] == '.') continue;
        if (k->nallowed == MAX_ALLOWED) {
            rc = psg_error_set("key folder %s: over %d public keys", k->dir, MAX_ALLOWED);
            break;
        }
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", k->dir, e->d_name);
        uint8_t(*v)[PSG_CURVE_KEY_BYTES] =
            realloc(k->allowed, (size_t)(k->nallowed + 1) * sizeof *v);
        if (v) k->allowed = v;
        char(*names)[PSG_CURVE_NAME_MAX] =
            v ? realloc(k->names, (size_t)(k->nallowed + 1) * sizeof *names) : NULL;
        if (!names) {
            rc = psg_error_set("out of memory");
            break;
        }
        k->names = names;
        if ((rc = load_cert(path, k->allowed[k->nallowed], NULL)) < 0) break;
        /* the file's NAME, as keygen writes it; a name keygen would refuse: the key itself */
        char *name = k->names[k->nallowed], stem[256];
        snprintf(stem, sizeof stem, "%.*s", (int)(n - 4), e->d_name);
        if (valid_name(stem)) /* shorter than PSG_CURVE_NAME_MAX */
            memcpy(name, stem, strlen(stem) + 1);
        else
            zmq_z85_encode(name, k->allowed[k->nallowed], PSG_CURVE_KEY_BYTES);
        k->nallowed++;
    }
    closedir(d);
    return rc;
}

psg_curve_keys_t *psg_curve_keys_load(const char *dir, const char *identity) {
    if (!identity) identity = PSG_CURVE_CLUSTER;
    psg_curve_keys_t *k = calloc(1, sizeof *k);
    if (!k) {
        psg_error_set("out of memory");
        return NULL;
    }
    snprintf(k->dir, sizeof k->dir, "%s", dir);
    char pub[1200], sec[1220];
    if (!valid_name(identity)) {
        psg_error_set("key name \"%.64s\": letters, digits, '_', '-' and '.' only", identity);
        goto fail;
    }
    if (check_dir(dir, &k->k8s) < 0) goto fail;
    /* the cluster's public key: the one every server shows */
    snprintf(pub, sizeof pub, "%s/%s.key", dir, PSG_CURVE_CLUSTER);
    snprintf(sec, sizeof sec, "%s/%s.key_secret", dir, PSG_CURVE_CLUSTER);
    if (access(pub, F_OK) < 0) {
        psg_error_set(
            "key folder %s has no %s.key (make the cluster's keys with `psgraph keygen %s`)", dir,
            PSG_CURVE_CLUSTER, dir);
        goto fail;
    }
    if (load_cert(pub, k->server_public, NULL) < 0) goto fail;
    if (access(sec, F_OK) == 0) {
        uint8_t check[PSG_CURVE_KEY_BYTES];
        if (check_secret(sec, k->k8s) < 0 || load_cert(pub, check, k->server_secret) < 0) goto fail;
        if (memcmp(check, k->server_public, sizeof check)) {
            psg_error_set("%s and %s are not one pair", pub, sec);
            goto fail;
        }
        k->has_server_secret = true;
    }
    /* this identity's pair */
    snprintf(pub, sizeof pub, "%s/%s.key", dir, identity);
    snprintf(sec, sizeof sec, "%s/%s.key_secret", dir, identity);
    if (access(sec, F_OK) < 0) {
        psg_error_set(
            "key folder %s has no %s.key_secret (the secret key of \"%s\"; `psgraph keygen "
            "%s%s%s` makes it)",
            dir, identity, identity, dir, strcmp(identity, PSG_CURVE_CLUSTER) ? " --name " : "",
            strcmp(identity, PSG_CURVE_CLUSTER) ? identity : "");
        goto fail;
    }
    if (check_secret(sec, k->k8s) < 0 || load_cert(pub, k->own_public, k->own_secret) < 0)
        goto fail;
    zmq_z85_encode(k->own_public_txt, k->own_public, PSG_CURVE_KEY_BYTES);
    if (load_allow_list(k) < 0) goto fail;
    return k;
fail:
    psg_curve_keys_destroy(&k);
    return NULL;
}

void psg_curve_keys_destroy(psg_curve_keys_t **kp) {
    if (!kp || !*kp) return;
    psg_curve_keys_t *k = *kp;
    *kp = NULL;
    free(k->allowed);
    free(k->names);
    /* secrets do not linger in freed memory */
    memset(k, 0, sizeof *k);
    free(k);
}

const char *psg_curve_keys_dir(const psg_curve_keys_t *k) {
    return k->dir;
}
const char *psg_curve_keys_public(const psg_curve_keys_t *k) {
    return k->own_public_txt;
}
int psg_curve_keys_allowed(const psg_curve_keys_t *k) {
    return k->nallowed;
}

const char *psg_curve_keys_name(const psg_curve_keys_t *k, const uint8_t *key) {
    /* the cluster's key by its role, whatever other file holds a copy of it */
    if (!memcmp(k->server_public, key, PSG_CURVE_KEY_BYTES)) return PSG_CURVE_CLUSTER;
    for (int i = 0; i < k->nallowed; i++)
        if (!memcmp(k->allowed[i], key, PSG_CURVE_KEY_BYTES)) return k->names[i];
    return NULL;
}

/* ---- sockets ---- */

static int set_key(void *sock, int opt, const uint8_t *key, const char *what) {
    if (zmq_setsockopt(sock, opt, key, PSG_CURVE_KEY_BYTES) < 0)
        return psg_error_set("cannot set the CURVE %s: %s (is libzmq built with CURVE?)", what,
                             zmq_strerror(errno));
    return 0;
}

int psg_curve_apply_client(void *sock, const psg_curve_keys_t *k) {
    if (set_key(sock, ZMQ_CURVE_SERVERKEY, k->server_public, "server key") < 0 ||
        set_key(sock, ZMQ_CURVE_PUBLICKEY, k->own_public, "public key") < 0 ||
        set_key(sock, ZMQ_CURVE_SECRETKEY, k->own_secret, "secret key") < 0)
        return -1;
    return 0;
}

int psg_curve_apply_server(void *sock, const psg_curve_keys_t *k) {
    if (!k->has_server_secret)
        return psg_error_set("key folder %s has no %s.key_secret: a task cannot serve with a "
                             "client's keys",
                             k->dir, PSG_CURVE_CLUSTER);
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) < 0)
        return psg_error_set("cannot make a CURVE server: %s", zmq_strerror(errno));
    return set_key(sock, ZMQ_CURVE_SECRETKEY, k->server_secret, "secret key");
}

/* ---- when a task may listen without keys ---- */

/* The host of "tcp://host:port" or "host:port" into out (brackets of [v6] removed). */
static void host_of(const char *endpoint, char *out, size_t size) {
    const char *h = strncmp(endpoint, "tcp://", 6) ? endpoint : endpoint + 6;
    const char *colon = strrchr(h, ':');
    size_t n = colon ? (size_t)(colon - h) : strlen(h);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') h++, n -= 2;
    if (n >= size) n = size - 1;
    memcpy(out, h, n);
    out[n] = 0;
}

bool psg_curve_is_loopback(const char *endpoint) {
    char host[256];
    host_of(endpoint, host, sizeof host);
    if (!strcmp(host, "localhost")) return true;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return false;
}

/* An ipc:// socket's folder: ours, nothing for others. */
static int check_ipc_dir(const char *endpoint) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", endpoint + 6);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    struct stat st;
    if (stat(dir, &st) < 0)
        return psg_error_set("%s: its folder %s: %s", endpoint, dir, strerror(errno));
    if (st.st_uid != geteuid() || (st.st_mode & 077))
        return psg_error_set("%s: its folder %s is open to other users (mode %04o, uid %d): ipc:// "
                             "carries plain frames, protected only by the folder, which must be "
                             "ours and 0700 (or give --insecure)",
                             endpoint, dir, (unsigned)(st.st_mode & 07777), (int)st.st_uid);
    return 0;
}

int psg_curve_listen_check(const char *endpoint, const psg_curve_keys_t *keys, bool insecure) {
    if (!strncmp(endpoint, "inproc://", 9)) return 0;
    if (!strncmp(endpoint, "ipc://", 6)) return insecure ? 0 : check_ipc_dir(endpoint);
    if (keys) return 0;
    if (psg_curve_is_loopback(endpoint)) {
        psg_error_set("%s takes plain frames, without keys: any user of this host can reach it "
                      "(make keys with `psgraph keygen DIR` and give every task --keys DIR; "
                      "docs/security.md)",
                      endpoint);
        return 1;
    }
    if (insecure) return 0;
    return psg_error_set("refusing to listen on %s without keys: anyone who reaches it could read "
                         "or overwrite every variable and end the job. Make keys with `psgraph "
                         "keygen DIR` and give every task --keys DIR (or \"keys\": \"DIR\" in the "
                         "cluster file, or %s=DIR); or give --insecure on a network you trust",
                         endpoint, PSG_CURVE_KEYS_ENV);
}
