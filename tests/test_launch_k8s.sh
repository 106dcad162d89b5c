#!/usr/bin/env bash
# `psgraph launch --k8s`: the objects it writes hold what a user checks (a Secret with the
# cluster's CURVE keys, in a file only its owner reads, mounted read-only with mode 0400 in
# every pod, PSGRAPH_KEYS naming the mount and no PSGRAPH_INSECURE; --keys DIR puts those
# keys in it; a headless Service, an Indexed Job per job with its completions, the restart
# policy of --restart, resources and GPUs, the logdir volume); they validate against the schema of a current Kubernetes
# (kubernetes-validate from PyPI, installed into a venv under the build folder; that part
# is skipped where PyPI cannot be reached) and a broken copy does not; and each pod's
# command, with its environment from the YAML and its index, runs on an emulated host named
# as the headless Service names the pod (psgraph-ps-0.psgraph.default.svc.cluster.local),
# with the Secret laid out as the kubelet does (a read-only tmpfs, files linked through
# ..data into a ..TIMESTAMP folder): 1 ps + 2 workers serve with CURVE and train to the end;
# the Secret with mode 0444 is refused, naming the file; the pods of a Python script
# (tests/python/k8s_job.py, the build tree's package as the image's) train the same way and
# leave their checkpoint in the script's --train_dir. No Kubernetes runs here: the kubelet's
# part is emulated. Skips (77) the pods' part where namespaces cannot be made.
set -u
psgraph=$(realpath "$1")
builddir=$(realpath "${2:-$(dirname "$psgraph")/..}")
asan=${3:-} # "asan": the build is sanitized
root=$(cd "$(dirname "$0")/.." && pwd)
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d /tmp/psg_test_k8s.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# 1. the objects
"$psgraph" launch --k8s --ps 2 --workers 3 --gpus-per-worker 1 --cpu 2 --memory 4Gi --logdir-volume ckpts \
  --restart on-failure --image reg.example/psgraph:1 --data fmnist --node-selector disktype=ssd \
  --node-selector example.com/pool=train --toleration dedicated=ml:NoSchedule --toleration nvidia.com/gpu \
  --ttl-after-finished 600 --active-deadline 7200 --out "$tmp/k8s" -- psgraph train --model mlp \
  --device gpu --logdir /ckpt --data-dir /data/fm >"$tmp/out" 2>&1; rc=$?
if [ $rc = 0 ] && [ "$(stat -c %a "$tmp/k8s/psgraph.yaml")" = 600 ] && python3 - "$tmp/k8s/psgraph.yaml" <<'PY'
import base64, json, sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
secret, svc, ps, wk = docs
assert secret["kind"] == "Secret" and secret["metadata"]["name"] == "psgraph-keys", secret["metadata"]
assert sorted(secret["data"]) == ["cluster.key", "cluster.key_secret"], sorted(secret["data"])
pub, sec = (base64.b64decode(secret["data"][k]).decode() for k in ("cluster.key", "cluster.key_secret"))
assert "public-key = " in pub and "secret-key = " not in pub and "secret-key = " in sec, pub
assert svc["kind"] == "Service" and svc["spec"]["clusterIP"] == "None", svc
for job, n in ((ps, 2), (wk, 3)):
    s = job["spec"]
    assert job["kind"] == "Job" and s["completionMode"] == "Indexed" and s["completions"] == n == s["parallelism"], s
    pod = s["template"]["spec"]
    assert pod["subdomain"] == "psgraph" and pod["restartPolicy"] == "OnFailure", pod
    c = pod["containers"][0]
    assert c["image"] == "reg.example/psgraph:1"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert "PSGRAPH_INSECURE" not in env, env
    keys = [m for m in c["volumeMounts"] if m["name"] == "keys"]
    assert len(keys) == 1 and keys[0]["readOnly"] is True and keys[0]["mountPath"] == env["PSGRAPH_KEYS"], keys
    vol = [v for v in pod["volumes"] if v["name"] == "keys"][0]["secret"]
    assert vol == {"secretName": "psgraph-keys", "defaultMode": 0o400}, vol
    cluster = json.loads(env["PSG_CLUSTER"])
    assert cluster["ps"][1] == "psgraph-ps-1.psgraph.default.svc.cluster.local:2222", cluster
    assert len(cluster["worker"]) == 3
    assert c["resources"]["limits"]["cpu"] == "2" and c["resources"]["requests"]["memory"] == "4Gi"
    assert (c["resources"]["limits"].get("nvidia.com/gpu") == "1") == (job is wk), c["resources"]
    assert c["volumeMounts"][0]["mountPath"] == "/ckpt"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "ckpts"
    # the data volume (a PVC here) read-only at the command's --data-dir, for the workers only
    data = [m for m in c["volumeMounts"] if m["name"] == "data"]
    assert data == ([{"name": "data", "mountPath": "/data/fm", "readOnly": True}] if job is wk else []), data
    vols = {v["name"]: v for v in pod["volumes"]}
    assert ("data" in vols) == (job is wk) and (job is ps or vols["data"]["persistentVolumeClaim"]["claimName"] == "fmnist"), vols
    assert s["ttlSecondsAfterFinished"] == 600 and s["activeDeadlineSeconds"] == 7200, s
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}, pod
    assert pod["nodeSelector"] == {"disktype": "ssd", "example.com/pool": "train"}, pod["nodeSelector"]
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
                                  {"key": "nvidia.com/gpu", "operator": "Exists"}], pod["tolerations"]
assert wk["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["psgraph", "train"]
assert ps["spec"]["template"]["spec"]["containers"][0]["args"] == ["psgraph", "server", "--logdir", "/ckpt"]
PY
then
  ok "--k8s: a Secret of the keys (file mode 0600) mounted read-only, 0400, in every pod at \$PSGRAPH_KEYS, no PSGRAPH_INSECURE; a headless Service and Indexed Jobs (2 ps, 3 workers), OnFailure, resources, GPUs with --device gpu, the PVCs (logdir; data read-only at --data-dir, workers only), nodeSelector, tolerations, ttlSecondsAfterFinished, activeDeadlineSeconds, the image's non-root user"
else
  fail "--k8s objects (rc $rc): $(cat "$tmp/out")"
fi
"$psgraph" launch --k8s --ps 1 --workers 1 --data /srv/fmnist --logdir-volume /srv/logs -- "$psgraph" train \
  --logdir /logs >"$tmp/defaults.yaml" 2>"$tmp/err"
out=$(cat "$tmp/defaults.yaml")
if grep -q "restartPolicy: Never" <<<"$out" && grep -q "backoffLimit: 0" <<<"$out" &&
   grep -q "the pods run the image's psgraph (psgraph:[0-9.]*) for $psgraph" "$tmp/err" && python3 - "$tmp/defaults.yaml" <<'PY'
import sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
for job in docs[2:]:
    s = job["spec"]
    pod = s["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"].startswith("psgraph:") and c["args"][0] == "psgraph", c
    # requests without limits: Burstable, not BestEffort
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}}, c["resources"]
    assert s["ttlSecondsAfterFinished"] == 3600 and s["activeDeadlineSeconds"] == 604800, s
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["logdir"]["hostPath"] == {"path": "/srv/logs", "type": "DirectoryOrCreate"}, vols
    assert job["metadata"]["name"] == "psgraph-ps" or vols["data"]["hostPath"] == {"path": "/srv/fmnist", "type": "Directory"}, vols
    assert job["metadata"]["name"] == "psgraph-ps" or {"name": "data", "mountPath": "/usr/share/datasets/fashion-mnist", "readOnly": True} in c["volumeMounts"]
PY
then
  ok "defaults: restartPolicy Never, backoffLimit 0, requests cpu 1 and 1Gi without limits (Burstable), a TTL of 1 h and a deadline of 7 days, the image psgraph:VERSION; $psgraph in the command is the image's psgraph (said: $(cat "$tmp/err")); hostPath volumes for --data (train's default --data-dir) and --logdir-volume"
else
  fail "--k8s defaults: $(cat "$tmp/err") $out"
fi
out=$("$psgraph" launch --k8s --ps 1 --workers 1 -- psgraph train 2>&1)
grep -q "emptyDir" <<<"$out" && ok "no --logdir-volume: an emptyDir" || fail "no --logdir-volume: $out"
# what would not run as written is refused before any object is written
refused() { # want-in-message args...
  local want=$1 out rc
  shift
  out=$("$psgraph" launch --k8s --ps 1 --workers 1 "$@" 2>&1); rc=$?
  if [ $rc = 2 ] && grep -qF -- "$want" <<<"$out" && ! grep -q "kind:" <<<"$out"; then
    ok "refused: $out"
  else
    fail "not refused as '$want' (rc $rc): $out"
  fi
}
refused "--gpus-per-worker 1 asks for GPUs that the workers' command does not use: add --device gpu" \
  --gpus-per-worker 1 -- psgraph train
refused "has --device gpu, but no --gpus-per-worker G" -- psgraph train --device gpu
refused "the workers' program build/mytrainer is a path on this machine; the pods run the image psgraph:" -- build/mytrainer
refused "the workers' --data-dir data/fm is relative" --data fm -- psgraph train --data-dir data/fm
refused "the workers' --logdir runs is relative" -- psgraph train --logdir runs
refused "--node-selector 'disktype' is not KEY=VALUE" --node-selector disktype -- psgraph train
refused "--toleration 'gpu:Never' is not KEY[=VALUE][:NoSchedule|PreferNoSchedule|NoExecute]" --toleration gpu:Never -- psgraph train
"$psgraph" keygen "$tmp/mine" >/dev/null
out=$("$psgraph" launch --k8s --keys "$tmp/mine" --ps 1 --workers 1 -- psgraph train 2>&1)
want=$(base64 -w0 "$tmp/mine/cluster.key_secret")
out2=$("$psgraph" launch --k8s --keys "$tmp/nokeys" --ps 1 --workers 1 -- psgraph train 2>&1); rc=$?
if grep -q "^  cluster.key_secret: $want$" <<<"$out" && [ $rc = 1 ] && grep -q "^psgraph launch: --keys: key folder $tmp/nokeys" <<<"$out2" &&
   ! grep -q "kind:" <<<"$out2"; then
  ok "--keys DIR: its pair in the Secret; a missing folder is named before any object is written: $out2"
else
  fail "--k8s --keys (rc $rc): $(grep cluster.key_secret <<<"$out") / $out2"
fi
out=$("$psgraph" launch --k8s --name Bad_Name --ps 1 --workers 1 -- psgraph train 2>&1); rc=$?
if [ $rc = 2 ] && grep -q "\-\-name 'Bad_Name' is not a DNS label" <<<"$out"; then
  ok "a bad --name is named: $out"
else
  fail "bad --name (rc $rc): $out"
fi

# --workers MIN:MAX: the chief in a Job of its own (the "chief" job of TF_CONFIG), so that
# scaling the worker Job in never deletes it; the worker Job holds the other MAX - 1 workers,
# MIN - 1 of them running (raising its parallelism starts the next pods); a pod of index
# MIN - 1 or more joins (--join), as its command runs it; a deleted pod's grace covers a leave
"$psgraph" launch --k8s --ps 1 --workers 2:4 --out "$tmp/elastic" -- psgraph train \
  --data-shards dispatch >"$tmp/elastic.out" 2>&1; rc=$?
if [ $rc = 0 ] && python3 - "$tmp/elastic/psgraph.yaml" <<'PY'
import json, subprocess, sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job"}
assert sorted(jobs) == ["psgraph-chief", "psgraph-ps", "psgraph-worker"], sorted(jobs)
ps, chief, wk = jobs["psgraph-ps"], jobs["psgraph-chief"], jobs["psgraph-worker"]
assert wk["spec"]["completions"] == 3 and wk["spec"]["parallelism"] == 1, wk["spec"]
assert chief["spec"]["completions"] == 1 == chief["spec"]["parallelism"], chief["spec"]
assert ps["spec"]["parallelism"] == 1 and "PSG_JOIN_FROM" not in str(ps), ps["spec"]
assert "PSG_JOIN_FROM" not in str(chief), chief
assert wk["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 10, wk["spec"]
envs = {}
for name, job in jobs.items():
    c = job["spec"]["template"]["spec"]["containers"][0]
    envs[name] = {e["name"]: e["value"] for e in c["env"]}
    assert job["spec"]["template"]["metadata"]["labels"]["psgraph/job"] == name.split("-")[1]
cluster = json.loads(envs["psgraph-worker"]["PSG_CLUSTER"])
assert all(json.loads(e["PSG_CLUSTER"]) == cluster for e in envs.values()), envs
assert cluster["chief"] == ["psgraph-chief-0.psgraph.default.svc.cluster.local:2222"], cluster
assert len(cluster["worker"]) == 3 and cluster["worker"][0].startswith("psgraph-worker-0."), cluster
assert envs["psgraph-chief"]["PSG_JOB"] == "chief" and envs["psgraph-worker"]["PSG_JOB"] == "worker"
for job, indexes, joins in ((wk, range(3), lambda i: i >= 1), (chief, [0], lambda i: False)):
    c = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert job is chief or env["PSG_JOIN_FROM"] == "1", env
    for index in indexes:
        e = dict(env, JOB_COMPLETION_INDEX=str(index), PATH="/usr/bin:/bin")
        # the pod's command with echo for its program: the arguments it runs with
        got = subprocess.run(c["command"] + ["echo"] + c["args"][1:], env=e, capture_output=True,
                             text=True, check=True).stdout.split()
        assert got[:1] == ["train"] and ("--join" in got) == joins(index), (index, got)
PY
then
  ok "--workers 2:4: the chief in its own Job (TF_CONFIG's chief job: scaling the worker Job in never deletes it), the worker Job's completions 3, parallelism 1 (raised to start the next pods), its pods 1 and 2 run with --join, terminationGracePeriodSeconds covers a leave"
else
  fail "--k8s --workers 2:4 (rc $rc): $(cat "$tmp/elastic.out")"
fi

# 2. the schema of a current Kubernetes
venv=$builddir/k8s-venv
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  { python3 -m venv "$venv" && timeout 180 "$venv/bin/pip" install -q kubernetes-validate; } >"$tmp/pip.log" 2>&1
fi
if [ -x "$venv/bin/kubernetes-validate" ]; then
  sed 's/completionMode: Indexed/completionMode: 3/; s/clusterIP: None/clusterIp: None/' "$tmp/k8s/psgraph.yaml" >"$tmp/broken.yaml"
  if out=$("$venv/bin/kubernetes-validate" --strict "$tmp/k8s/psgraph.yaml" "$tmp/elastic/psgraph.yaml" 2>&1) &&
     ! "$venv/bin/kubernetes-validate" --strict "$tmp/broken.yaml" >"$tmp/broken.out" 2>&1; then
    ok "kubernetes-validate --strict ($("$venv/bin/kubernetes-validate" --version)): the objects pass, a broken copy fails"
  else
    fail "kubernetes-validate: $out / broken: $(cat "$tmp/broken.out")"
  fi
else
  echo "skip kubernetes-validate: cannot install it from PyPI into $venv: $(tail -2 "$tmp/pip.log")"
fi

# 3. the pods' commands on emulated hosts named as the Service names the pods
. "$root/tools/hosts.sh"
if ! hosts_init; then
  echo "skip running the pods on emulated hosts"
  [ $fails = 0 ]
  exit
fi
HOSTS_AT_EXIT+=('rm -rf "$tmp"')
"$psgraph" launch --k8s --ps 1 --workers 2 --out "$tmp/run" -- psgraph train --model mlp --data synthetic \
  --steps 30 --log-every 10 --step-timeout 20 >/dev/null
mkdir -p "$tmp/bin" && ln -s "$psgraph" "$tmp/bin/psgraph" # the image's psgraph on PATH
# pods_of YAML [ENV_JSON]: one line per pod, tab-separated: its name, then the pod's argv and
# env as JSON (plus ENV_JSON: what the image would set); the Secret's files into $tmp/secret
# (the pods see them at $keys: PSGRAPH_KEYS is the Secret's mountPath, which is
# /etc/psgraph/keys in a pod and this folder here)
keys=$tmp/keys
mkdir -p "$keys" "$tmp/secret"
pods_of() {
  python3 - "$1" "$tmp/secret" "$keys" "${2:-"{}"}" <<'PY'
import base64, json, os, sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d["kind"] == "Secret":
        for name, data in d["data"].items():
            with open(os.path.join(sys.argv[2], name), "wb") as f:
                f.write(base64.b64decode(data))
    if d["kind"] != "Job":
        continue
    c = d["spec"]["template"]["spec"]["containers"][0]
    for i in range(d["spec"]["completions"]):
        env = {e["name"]: e["value"] for e in c["env"]}
        env["JOB_COMPLETION_INDEX"] = str(i)  # set by Kubernetes in an Indexed Job's pod
        env["PSGRAPH_KEYS"] = sys.argv[3]
        env.update(json.loads(sys.argv[4]))
        print(f'{d["metadata"]["name"]}-{i}', json.dumps(c["command"] + c["args"]), json.dumps(env), sep="\t")
PY
}
pods_of "$tmp/run/psgraph.yaml" >"$tmp/pods"
# $2... with the Secret at $keys as the kubelet lays it out with defaultMode $1: its own
# tmpfs (1777, root's), the files in a ..TIMESTAMP folder (0755), ..data linking to it, a
# link per file through ..data, the mount read-only; in a mount namespace of its own
secret_pod() {
  unshare -m --propagation private sh -c 'mode=$1 keys=$2 secret=$3; shift 3
    ts=..2026_11_23_22_00_00.123456789
    mount -t tmpfs tmpfs "$keys" && mkdir -m 755 "$keys/$ts" && ln -s "$ts" "$keys/..data" || exit 1
    for f in "$secret"/*; do
      install -m "$mode" "$f" "$keys/$ts/" && ln -s "..data/${f##*/}" "$keys/${f##*/}" || exit 1
    done
    mount -o remount,ro "$keys" && exec "$@"' sh "$@"
}
# run_pods PODS LOGPREFIX: each pod's command on its host (h0, h1, ... in the order of PODS,
# named as the Service names its pod), its output in LOGPREFIX-POD.log; prints the exit codes
run_pods() {
  local i=0 pids=() pod argv env p rcs=""
  while IFS=$'\t' read -r pod argv env; do
    hosts_exec "h$i" bash -c "$(declare -f secret_pod); secret_pod \"\$@\"" sh 400 "$keys" "$tmp/secret" \
      env -i PATH="$tmp/bin:/usr/bin:/bin" python3 -c '
import json, os, sys
argv, env = json.loads(sys.argv[1]), json.loads(sys.argv[2])
os.environ.update(env)
os.execvp(argv[0], argv)' "$argv" "$env" >"$2-$pod.log" 2>&1 &
    pids+=($!)
    i=$((i + 1))
  done <"$1"
  for p in "${pids[@]}"; do wait "$p"; rcs="$rcs $?"; done
  echo "$rcs"
}
hosts=()
while IFS=$'\t' read -r pod _; do hosts+=("h${#hosts[@]}"); done <"$tmp/pods"
hosts_up "${hosts[@]}" || { echo "FAIL: hosts_up"; exit 1; }
i=0
while IFS=$'\t' read -r pod _; do hosts_alias "h$i" "$pod.psgraph.default.svc.cluster.local $pod"; i=$((i + 1)); done <"$tmp/pods"
rcs=$(run_pods "$tmp/pods" "$tmp/c")
if [ "$rcs" = " 0 0 0" ] && grep -q '{"event":"done".*"workers":2,"ps":1' "$tmp/c-psgraph-worker-0.log" &&
   grep -q "serving on tcp://0.0.0.0:2222 with CURVE (keys $keys)" "$tmp/c-psgraph-ps-0.log" &&
   grep -q "stopped: job done" "$tmp/c-psgraph-ps-0.log"; then
  ok "the 3 pods' commands on hosts psgraph-{ps-0,worker-0,worker-1}.psgraph.default.svc.cluster.local, the Secret mounted as the kubelet does: served with CURVE, trained, exit 0"
else
  fail "pods on emulated hosts (exit codes$rcs): $(for f in "$tmp"/c-psgraph-*.log; do echo "== $f"; tail -n 5 "$f"; done)"
fi
# the Secret with defaultMode 0444: the secret key readable by every user of the pod
out=$(hosts_exec h0 bash -c "$(declare -f secret_pod); secret_pod \"\$@\"" sh 444 "$keys" "$tmp/secret" \
  env -i PSGRAPH_KEYS="$keys" "$psgraph" server --task-name /job:ps/task:0 --listen tcp://0.0.0.0:2222 2>&1); rc=$?
if [ $rc = 2 ] && grep -q "$keys/cluster.key_secret is open to other users (mode 0444); give its Secret volume defaultMode 0400" <<<"$out"; then
  ok "a Secret mounted with mode 0444 is refused: $out"
else
  fail "Secret with mode 0444 (rc $rc): $out"
fi

# 4. the pods of a Python script (tests/python/k8s_job.py: the replica setter cuts its dense
# kernel into two row shards) on the same hosts: the image's package is the build tree's;
# under ASan the sanitizer is preloaded into Python, as the package's tests do
pyenv="{\"PYTHONPATH\": \"$builddir/python\", \"PYTHONDONTWRITEBYTECODE\": \"1\""
[ -n "$asan" ] && pyenv="$pyenv, \"LD_PRELOAD\": \"$(cc -print-file-name=libasan.so)\", \"ASAN_OPTIONS\": \"detect_leaks=0\""
pyenv="$pyenv}"
if ! env -i PATH=/usr/bin:/bin python3 -c 'import json, os, sys; os.environ.update(json.loads(sys.argv[1])); import psgraph.compat.v1' "$pyenv" 2>/dev/null; then
  echo "skip a Python script's pods: no psgraph package in $builddir/python"
else
  "$psgraph" launch --k8s --ps 1 --workers 2 --out "$tmp/py" -- python3 "$root/tests/python/k8s_job.py" \
    --train_dir "$tmp/pyckpt" >/dev/null
  pods_of "$tmp/py/psgraph.yaml" "$pyenv" >"$tmp/pypods"
  rcs=$(run_pods "$tmp/pypods" "$tmp/py")
  done_line=$(grep '^{"event": "done"' "$tmp/py-psgraph-worker-0.log")
  ckpt=$(ls "$tmp/pyckpt"/model.ckpt-*.index.json 2>/dev/null | tail -1)
  if [ "$rcs" = " 0 0 0" ] && python3 -c 'import json, sys; d = json.loads(sys.argv[1]); assert d["global_step"] >= 39' "$done_line" 2>/dev/null &&
     grep -q '^{"event": "done"' "$tmp/py-psgraph-worker-1.log" &&
     grep -q "serving on tcp://0.0.0.0:2222 with CURVE (keys $keys)" "$tmp/py-psgraph-ps-0.log" &&
     grep -q "stopped: job done" "$tmp/py-psgraph-ps-0.log" && [ -n "$ckpt" ] &&
     grep -q '"dense/kernel/part_1"' "$ckpt" && "$psgraph" inspect "$ckpt" >"$tmp/inspect" 2>&1; then
    ok "a Python script's 3 pods (python3 k8s_job.py, psgraph server --logdir from its --train_dir) on the same hosts with CURVE: $done_line; $(basename "$ckpt") holds dense/kernel/part_0..1, psgraph inspect reads it"
  else
    fail "a Python script's pods (exit codes$rcs, checkpoint '$ckpt'): $(for f in "$tmp"/py-psgraph-*.log; do echo "== $f"; tail -n 8 "$f"; done)"
  fi
fi
[ $fails = 0 ]
