"""profscope: a self-hosted dashboard for PyTorch profiler output."""

__version__ = "0.1.0"
