"""trainperf: train language models to a quality target, log it the MLPerf way, plan it for clusters."""

__version__ = "0.1.0"
