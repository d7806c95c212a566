"""The ONNX model in and out: a model file read (its weights mapped or left on disk, its light proto), its stale
declarations repaired, its nodes checked, crossed into onnx-ir and back, fingerprinted, and written (the skeleton,
the wire format, the IR version ONNX Runtime loads). The files themselves are read and written through files/."""
