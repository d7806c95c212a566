"""The process boundary to ONNX Runtime: the client this process asks, the server process that owns the sessions,
and the channel between them. Generic requests only (a session from a model's bytes, a run of feeds, timed runs,
counts of values); what a request means to ampconfig is decided above, in runner/ and opinfo/."""
