"""Everything that touches ONNX Runtime lives in this package: sessions, kernel checks, inputs and timing."""
