"""TensorFlow's compat namespaces: psgraph.compat.v1 is TF 1.x's API over psgraph."""
