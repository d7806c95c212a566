"""What each target can run: the op info library, the built-in colours, the one-node probe models, and the probing
that measures them in ONNX Runtime (through the worker's client) or reads ORT's kernel and schema registries."""
