"""Reading input models and writing every output safely."""
