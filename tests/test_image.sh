#!/usr/bin/env bash
# The image of tools/image.sh, run with podman: built from Debian's packages (mmdebstrap, no
# base image), psgraph:VERSION with psgraph on PATH and a non-root user; in it
# `psgraph train --model mlp --steps 20`; a 1 ps + 2 worker cluster of three containers on a
# podman network (CURVE keys and the data mounted read-only) trains to the accuracy of the
# same cluster launched on this host (+-0.01); and the pods of `psgraph launch --k8s` run in
# it as the kubelet would run them (the pod's command and args, its env with its completion
# index, its hostname and the Service's DNS names, its user, fsGroup, the Secret as the
# kubelet lays it out with mode 0440 root:fsGroup, the data and logdir hostPath volumes):
# they train to the same accuracy and the ps and chief write the checkpoint into the logdir.
# Opt-in: building the image takes minutes (PSG_IMAGE_TEST=1; it installs podman, mmdebstrap,
# runc and iptables from Debian's packages when missing). The containers' network lives in a
# network namespace of the test's own (podman's bridge, its gateway address and netavark's
# rules there, 198.18.0.0/24; that namespace has no other interface, so nothing leaves it).
# Args: psgraph, the build folder (meson install's source).
set -u
psgraph=$(realpath "$1")
builddir=$(realpath "$2")
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${PSG_IMAGE_TEST:-0}" != 1 ]; then
  echo "skip: building the image takes minutes (mmdebstrap from Debian's mirror); PSG_IMAGE_TEST=1 runs it"
  exit 77
fi
[ "$(id -u)" = 0 ] || { echo "skip: podman and mmdebstrap here need root"; exit 77; }
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "skip: no Fashion-MNIST in $data"; exit 77; }
missing=()
for p in podman mmdebstrap runc iptables; do command -v "$p" >/dev/null || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      podman mmdebstrap runc iptables uidmap; } >/dev/null 2>&1 ||
    { echo "skip: cannot install ${missing[*]} (apt-get)"; exit 77; }
fi
. "$root/tools/hosts.sh"
hosts_init || exit 77
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$HOSTS_DIR
version=$(sed -n "s/^ *version : '\([^']*\)',*$/\1/p" "$root/meson.build" | head -1)
image=psgraph:$version

# 1. the image
t0=$(date +%s)
if ! (cd "$root" && bash tools/image.sh --builddir "$builddir" --out "$tmp/psgraph.oci.tar") >"$tmp/image.log" 2>&1; then
  echo "FAIL: tools/image.sh: $(tail -20 "$tmp/image.log")"
  exit 1
fi
built=$(tail -1 "$tmp/image.log")
echo "     $built in $(($(date +%s) - t0)) s"
size=$(podman image inspect --format '{{.Size}}' "$image")

# podman in a network namespace of this run: its bridge, addresses and rules stay there
box=$(hosts_ns box)
ip netns add "$box" && ip -n "$box" link set lo up || { echo "FAIL: netns $box"; exit 1; }
net=psg-$HOSTS_ID
HOSTS_AT_EXIT+=("podman rm -f --filter label=psg-test=$HOSTS_ID >/dev/null 2>&1; podman network rm -f $net >/dev/null 2>&1; ip netns del $box")
P=(nsenter --net="/run/netns/$box" podman)
# what runs here: crun refuses cgroups v1 beside a v2 mount (hybrid), runc takes them; the
# limits within what this sandbox lets a process raise
run=()
for rt in crun runc; do
  r=(run --runtime "$rt" --ulimit nofile=16384:16384 --ulimit nproc=16384:16384 --label "psg-test=$HOSTS_ID")
  if "${P[@]}" "${r[@]}" --rm --network none "$image" true >"$tmp/probe.$rt" 2>&1; then run=("${r[@]}"); break; fi
done
[ ${#run[@]} -gt 0 ] || { echo "FAIL: podman runs no container here: $(cat "$tmp"/probe.*)"; exit 1; }
conf=$("${P[@]}" image inspect --format '{{.Config.User}} {{.Config.WorkingDir}} {{range .Config.Env}}{{.}} {{end}}' "$image")
who=$("${P[@]}" "${run[@]}" --rm --network none "$image" sh -c 'echo "$(id -u):$(id -g) $(command -v psgraph)"')
oci=$(tar -xOf "$tmp/psgraph.oci.tar" index.json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifests"][0]["mediaType"])' 2>/dev/null)
if [[ "$conf" == "1000:1000 /home/psgraph "*PATH=/usr/local/bin:* ]] && [ "$who" = "1000:1000 /usr/local/bin/psgraph" ] &&
   [ "$oci" = application/vnd.oci.image.manifest.v1+json ] && [ "$size" -le 150000000 ]; then
  ok "$image: $size bytes (<= 150 MB), user 1000:1000, psgraph on PATH at /usr/local/bin/psgraph, an OCI archive"
else
  fail "the image: config '$conf', in it '$who', archive '$oci', size $size"
fi

# 2. psgraph train in it, the data mounted read-only
out=$("${P[@]}" "${run[@]}" --rm --network none -v "$data:$data:ro" "$image" \
  psgraph train --model mlp --steps 20 --log-every 10 2>&1); rc=$?
if [ $rc = 0 ] && grep -q '^{"event":"done"' <<<"$out"; then
  ok "psgraph train --model mlp --steps 20 in the image: $(grep -o '"test_accuracy":[0-9.]*' <<<"$out")"
else
  fail "train in the image (rc $rc): $out"
fi

# 3. three containers on a podman network against the same cluster on this host
train=(train --model mlp --optimizer adam --lr 0.001 --batch 64 --sync sync --steps 300 --log-every 100
       --step-timeout 30)
accuracy() { sed -n 's/^\(\[worker0\] \)\{0,1\}{"event":"done".*"test_accuracy":\([0-9.]*\).*/\2/p' "$1" | tail -1; }
close() { python3 -c 'import sys; sys.exit(not (sys.argv[1] and sys.argv[2] and abs(float(sys.argv[1]) - float(sys.argv[2])) <= 0.01))' "$1" "$2"; }
"$psgraph" launch --ps 1 --workers 2 -- "$psgraph" "${train[@]}" >"$tmp/local.out" 2>&1
local_acc=$(accuracy "$tmp/local.out")
subnet=
for s in 240 224 208 192 176 160 144 128; do
  "${P[@]}" network create --disable-dns --subnet "198.18.0.$s/28" "$net" >/dev/null 2>&1 && { subnet=$s; break; }
done
[ -n "$subnet" ] || { echo "FAIL: no podman network in 198.18.0.128/25"; exit 1; }
ip_of() { echo "198.18.0.$((subnet + 2 + $1))"; } # ps-0, worker-0, worker-1
hosts_args=(--add-host "psgraph-ps-0:$(ip_of 0)" --add-host "psgraph-worker-0:$(ip_of 1)" --add-host "psgraph-worker-1:$(ip_of 2)")
"$psgraph" keygen "$tmp/keys" >/dev/null && chown -R 1000:1000 "$tmp/keys"
cluster='{"ps": ["psgraph-ps-0:2222"], "worker": ["psgraph-worker-0:2222", "psgraph-worker-1:2222"]}'
i=0
for task in ps:0 worker:0 worker:1; do
  job=${task%:*} k=${task#*:}
  args=(psgraph server)
  [ "$job" = worker ] && args=(psgraph "${train[@]}")
  "${P[@]}" "${run[@]}" -d --name "psg-$HOSTS_ID-$job$k" --network "$net" --ip "$(ip_of $i)" \
    --hostname "psgraph-$job-$k" "${hosts_args[@]}" -v "$tmp/keys:/keys:ro" -v "$data:$data:ro" \
    -e PSGRAPH_KEYS=/keys -e TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"$job\", \"index\": $k}}" \
    "$image" "${args[@]}" >/dev/null
  i=$((i + 1))
done
rcs=$(for c in ps0 worker0 worker1; do timeout 300 "${P[@]}" wait "psg-$HOSTS_ID-$c"; done | xargs)
for c in ps0 worker0 worker1; do "${P[@]}" logs "psg-$HOSTS_ID-$c" >"$tmp/c-$c.out" 2>&1; done
acc=$(accuracy "$tmp/c-worker0.out")
if [ "$rcs" = "0 0 0" ] && grep -q "serving on tcp://0.0.0.0:2222 with CURVE (keys /keys)" "$tmp/c-ps0.out" && close "$acc" "$local_acc"; then
  ok "1 ps + 2 workers in 3 containers on podman network 198.18.0.$subnet/28 with CURVE: test accuracy $acc, the same cluster on this host $local_acc (+-0.01)"
else
  fail "containers (exit codes '$rcs', accuracy '$acc', local '$local_acc'): $(tail -n 4 "$tmp"/c-*.out)"
fi
"${P[@]}" rm -f --filter "label=psg-test=$HOSTS_ID" >/dev/null 2>&1

# 4. the Kubernetes objects' pods, run as the kubelet would run them
mkdir -p "$tmp/logdir" && chown 1000:1000 "$tmp/logdir" # a hostPath its admin gave the pods' user
"$psgraph" launch --k8s --ps 1 --workers 2 --image "$image" --data "$data" --logdir-volume "$tmp/logdir" \
  --out "$tmp/k8s" -- "$psgraph" "${train[@]}" --logdir /logdir --checkpoint-every 100 >"$tmp/k8s.log" 2>&1 ||
  fail "launch --k8s: $(cat "$tmp/k8s.log")"
# one line a pod: its name, then podman run's arguments as JSON; the Secret's files into
# $tmp/secret as the kubelet lays a Secret volume out (..data -> a timestamped folder), each
# file root:fsGroup with defaultMode | 0440, as the kubelet makes them with an fsGroup
python3 - "$tmp/k8s/psgraph.yaml" "$tmp/secret" "$subnet" >"$tmp/pods" <<'PY'
import base64, json, os, sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
secret_dir, subnet = sys.argv[2], int(sys.argv[3])
pods, ip = [], {}
for d in docs:
    if d["kind"] == "Job":
        for i in range(d["spec"]["completions"]):
            name = f'{d["metadata"]["name"]}-{i}'
            ip[name] = f"198.18.0.{subnet + 2 + len(ip)}"
            pods.append((name, i, d))
svc = next(d for d in docs if d["kind"] == "Service")["metadata"]
for d in docs:
    if d["kind"] == "Secret":
        ts = os.path.join(secret_dir, "..2026_11_25_00_00_00.000000001")
        os.makedirs(ts)
        os.symlink(os.path.basename(ts), os.path.join(secret_dir, "..data"))
for name, index, job in pods:
    spec = job["spec"]["template"]["spec"]
    sc, c = spec["securityContext"], spec["containers"][0]
    for d in docs:
        if d["kind"] == "Secret" and not os.path.exists(os.path.join(secret_dir, "..data", next(iter(d["data"])))):
            vol = next(v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == d["metadata"]["name"])
            for f, data in d["data"].items():
                path = os.path.join(secret_dir, "..data", f)
                with open(path, "wb") as out:
                    out.write(base64.b64decode(data))
                os.chown(path, 0, sc["fsGroup"])
                os.chmod(path, vol["secret"]["defaultMode"] | 0o440)
                os.symlink(os.path.join("..data", f), os.path.join(secret_dir, f))
    args = ["--name", f"k8s-{name}", "--hostname", name, "--ip", ip[name],
            "--user", f'{sc["runAsUser"]}:{sc["runAsGroup"]}', "--group-add", str(sc["fsGroup"])]
    for other in ip:  # the cluster DNS: NAME.SUBDOMAIN.NAMESPACE.svc.cluster.local
        args += ["--add-host", f'{other}.{spec["subdomain"]}.{svc["namespace"]}.svc.cluster.local:{ip[other]}']
    env = {e["name"]: e["value"] for e in c["env"]}
    env["JOB_COMPLETION_INDEX"] = str(index)  # set by the Job controller in an Indexed Job's pod
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    vols = {v["name"]: v for v in spec["volumes"]}
    for m in c["volumeMounts"]:
        v = vols[m["name"]]
        src = secret_dir if "secret" in v else v["hostPath"]["path"]
        args += ["-v", f'{src}:{m["mountPath"]}{":ro" if m.get("readOnly") else ""}']
    args += ["--entrypoint", json.dumps(c["command"]), c["image"]] + c["args"]
    print(name, json.dumps(args), sep="\t")
PY
[ -s "$tmp/pods" ] || fail "no pods from the YAML"
while IFS=$'\t' read -r pod argv; do
  mapfile -t a < <(python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$argv")
  "${P[@]}" "${run[@]}" -d --network "$net" "${a[@]}" >/dev/null || fail "podman run $pod"
done <"$tmp/pods"
rcs=$(for pod in $(cut -f1 "$tmp/pods"); do timeout 300 "${P[@]}" wait "k8s-$pod"; done | xargs)
for pod in $(cut -f1 "$tmp/pods"); do "${P[@]}" logs "k8s-$pod" >"$tmp/$pod.out" 2>&1; done
acc=$(accuracy "$tmp/psgraph-worker-0.out")
if [ "$rcs" = "0 0 0" ] && close "$acc" "$local_acc" &&
   grep -q "serving on tcp://0.0.0.0:2222 with CURVE (keys /etc/psgraph/keys)" "$tmp/psgraph-ps-0.out" &&
   ls "$tmp/logdir"/model.ckpt-300.index.json >/dev/null 2>&1 && [ "$(stat -c %u "$tmp/logdir/model.ckpt-300.index.json")" = 1000 ]; then
  ok "the --k8s pods as the kubelet runs them (uid 1000, fsGroup, Secret 0440 root:1000, hostPath data and logdir): exit 0, test accuracy $acc (this host: $local_acc), checkpoint at step 300 in the logdir volume"
else
  fail "k8s pods (exit codes '$rcs', accuracy '$acc', local '$local_acc'): $(ls "$tmp/logdir"; tail -n 4 "$tmp"/psgraph-*.out)"
fi

# 5. `psgraph serve --k8s` on that logdir: the Deployment's pod as the kubelet runs it; its
#    readiness probe's path answers AVAILABLE at step 300 and a :predict gives 10
#    probabilities
"$psgraph" serve --k8s --model-dir /models --model-volume "$tmp/logdir" --name mlp --image "$image" \
  --out "$tmp/serve" >"$tmp/serve-k8s.log" 2>&1 || fail "serve --k8s: $(cat "$tmp/serve-k8s.log")"
serve_ip=198.18.0.$((subnet + 13))
python3 - "$tmp/serve/mlp.yaml" "$serve_ip" >"$tmp/serve.args" <<'PY'
import json, sys, yaml
dep = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment")
spec = dep["spec"]["template"]["spec"]
sc, c = spec.get("securityContext", {}), spec["containers"][0]
args = ["--name", "k8s-serve", "--hostname", dep["metadata"]["name"] + "-0", "--ip", sys.argv[2]]
if sc:
    args += ["--user", f'{sc["runAsUser"]}:{sc["runAsGroup"]}', "--group-add", str(sc["fsGroup"])]
vols = {v["name"]: v for v in spec["volumes"]}
for m in c["volumeMounts"]:
    args += ["-v", f'{vols[m["name"]]["hostPath"]["path"]}:{m["mountPath"]}{":ro" if m.get("readOnly") else ""}']
args += ["--entrypoint", json.dumps(c["command"][:1]), c["image"]] + c["command"][1:] + c.get("args", [])
print(json.dumps(args))
print(json.dumps(c["readinessProbe"]["httpGet"]))
PY
mapfile -t a < <(python3 -c 'import json, sys; print("\n".join(json.loads(open(sys.argv[1]).readline())))' "$tmp/serve.args")
"${P[@]}" "${run[@]}" -d --network "$net" "${a[@]}" >/dev/null || fail "podman run the serving pod"
answer=$(nsenter --net="/run/netns/$box" python3 - "$serve_ip" "$(sed -n 2p "$tmp/serve.args")" <<'PY'
import json, sys, time, urllib.request
ip, probe = sys.argv[1], json.loads(sys.argv[2])
base = f"http://{ip}:{probe['port']}"
for _ in range(300):  # the kubelet's readiness probe, until it passes
    try:
        status = urllib.request.urlopen(base + probe["path"], timeout=2).read().decode()
        break
    except OSError:
        time.sleep(0.2)
else:
    sys.exit("never ready")
meta = json.loads(urllib.request.urlopen(base + probe["path"] + "/metadata", timeout=5).read())
inputs = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
name, spec = next(iter(inputs.items()))
dims = [int(d["size"]) for d in spec["tensor_shape"]["dim"]][1:]
row = 0.5
for d in reversed(dims):
    row = [row] * d
body = json.dumps({"instances": [row]}).encode()
pred = json.loads(urllib.request.urlopen(base + probe["path"] + ":predict", body, timeout=10).read())
print(status, len(pred["predictions"][0]["probabilities"]))
PY
)
if grep -q '"version":"300","state":"AVAILABLE"' <<<"$answer" && [ "${answer##* }" = 10 ]; then
  ok "serve --k8s's pod in the image (user $(sed -n 1p "$tmp/serve.args" | grep -o '"--user", "[0-9:]*"' | cut -d'"' -f4), the logdir volume read-only): ready, $answer"
else
  fail "the serving pod: '$answer' $("${P[@]}" logs k8s-serve 2>&1 | tail -5)"
fi
[ $fails = 0 ]
