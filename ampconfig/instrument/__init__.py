"""Measuring copies of a model for ONNX Runtime: every value exposed as an output, values injected, float16 rounding
emulated on the CPU. They are run, never written for the user: the user's model is changed only by ``rewrite/``."""
