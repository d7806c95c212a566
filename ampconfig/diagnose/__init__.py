"""Where a rewrite goes wrong and what to keep in float32: per-node errors, ranges, tune."""
