"""Generator adapters: each one drives one traffic generator behind the interface in `base`."""

from .base import Counters, Generator, GeneratorError, get_generator

__all__ = ["Counters", "Generator", "GeneratorError", "get_generator"]
