"""Sessions of a user's model in ONNX Runtime, proof runs and timing: handles to the sessions the worker owns
(:mod:`ampconfig.worker`), the runs that prove a rewrite, the acceptance of models the ONNX checker rejects, the
measuring runs of values, and latency."""
