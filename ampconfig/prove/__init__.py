"""Run the fp32 reference and the rewrite, measure accuracy and latency, judge against the tolerance."""
