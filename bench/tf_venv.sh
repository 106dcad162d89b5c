# Sourced by the benches whose peer is TensorFlow 2.21 (bench/python.sh, bench/python_dist.sh):
# tf_venv makes the venv $venv when it lacks tensorflow-cpu==2.21.0 and tf-keras
# (tf.compat.v1.layers needs Keras 2: TF_USE_LEGACY_KERAS=1) and sets have_tf=1 when it has
# them, else prints a note; tfpy runs its python. TensorFlow is a peer, not a dependency.
# Needs $venv and $tmp (pip's log).
have_tf=0
tf_venv() {
  if ! TF_USE_LEGACY_KERAS=1 "$venv/bin/python" -c 'import tensorflow, tf_keras' 2>/dev/null; then
    { python3 -m venv "$venv" && timeout 1200 "$venv/bin/pip" install -q tensorflow-cpu==2.21.0 tf-keras==2.21.0; } \
      >"$tmp/pip.log" 2>&1
  fi
  if TF_USE_LEGACY_KERAS=1 "$venv/bin/python" -c 'import tensorflow, tf_keras' 2>/dev/null; then
    have_tf=1
  else
    echo "{\"bench\":\"python\",\"note\":\"no TensorFlow 2.21 in $venv (pip: $(tail -1 "$tmp/pip.log" | tr -d '"'))\"}"
  fi
}
tfpy() { TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=3 "$venv/bin/python" "$@" 2>/dev/null; }
