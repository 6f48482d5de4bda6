"""headway: grow small transformers on algorithmic tasks and measure the circuits they form."""

__version__ = "0.1.0"
