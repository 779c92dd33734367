"""ScenarioError: the one-line error every stage raises for a bad scenario value.

Its own module, below everything in sim/, so the Scenario, the timing sources and the engine can
all raise it without importing one another (sim.scenario re-exports it).
"""


class ScenarioError(ValueError):
    """A scenario value is out of range; the message is one line naming the field."""


class DoesNotFit(ScenarioError):
    """The deployment cannot run at all (vLLM would not start it with this pool and max_model_len):
    a Plan search shows such a configuration as a "does_not_fit" row instead of stopping."""
