"""PCN Lab: a Mininet/P4 testbed for distributed deep learning traffic."""

__version__ = "0.1.0"
