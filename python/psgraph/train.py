"""psgraph.train: what psgraph has beyond TF 1.x for a model written in Python.
`Strategy("ssp", staleness=1).optimizer(tf.train.GradientDescentOptimizer(0.1))` trains
a script's model under one of `psgraph train --sync`'s strategies (docs/python.md,
"Strategies"); `Strategy.from_env()` takes the one `psgraph compare --script` sets."""
from ._strategy import Strategy, StrategyOptimizer  # noqa: F401
from ._psgraph import strategy_names  # noqa: F401
