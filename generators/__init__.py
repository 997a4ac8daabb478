"""Generator adapters: each one drives one traffic generator behind the interface in `base`."""

from .base import Counters, Endpoint, Generator, GeneratorError, get_generator

__all__ = ["Counters", "Endpoint", "Generator", "GeneratorError", "get_generator"]
