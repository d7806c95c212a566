"""``tune``: search for the fewest float32 pins that meet a tolerance."""
