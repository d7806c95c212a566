"""Deciding every node's dtype: node facts, the mode policies and painting passes, the plan. Pure data."""
