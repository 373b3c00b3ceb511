"""tlacheck: a small breadth-first model checker for Python transcriptions of TLA+."""

from .cfg import Config, ConfigError
from .checker import Result, Step, Violation, check
from .model import EndProperty, Invariant, Model, Property, State, StepProperty, Transition
from .trace import format_violation
from .values import Fn, tla

__all__ = [
    "Config",
    "ConfigError",
    "EndProperty",
    "Fn",
    "Invariant",
    "Model",
    "Property",
    "Result",
    "State",
    "Step",
    "StepProperty",
    "Transition",
    "Violation",
    "check",
    "format_violation",
    "tla",
]
