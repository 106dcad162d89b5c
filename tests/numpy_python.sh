#!/usr/bin/env bash
# Sourced by tests and benches that check psgraph's numbers with numpy (a reference outside
# psgraph, never one of its dependencies): numpy_python DIR prints a Python that imports
# numpy: python3's own when it has numpy, else DIR/np-venv's, made there once (python3 -m
# venv + pip install numpy); prints nothing when neither can be had (no PyPI: skip then).
numpy_python() {
  local py venv=$1/np-venv
  for py in python3 /usr/bin/python3 "$venv/bin/python"; do
    if command -v "$py" >/dev/null && "$py" -c 'import numpy' 2>/dev/null; then
      command -v "$py"
      return 0
    fi
  done
  mkdir -p "$1"
  { python3 -m venv "$venv" && timeout 300 "$venv/bin/pip" install -q numpy; } >"$1/np-venv.log" 2>&1
  "$venv/bin/python" -c 'import numpy' 2>/dev/null && echo "$venv/bin/python"
}
