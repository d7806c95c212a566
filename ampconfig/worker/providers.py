"""ONNX Runtime's execution provider names: the one place they are spelled (the server builds sessions with them,
the sessions and the op info targets name them)."""

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
