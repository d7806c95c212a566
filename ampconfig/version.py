"""The version of ampconfig, at the bottom of the house: files that record it (locks, ranges files) import it from
here, not from the package root above them."""

__version__ = "0.1.0"
