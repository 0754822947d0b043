"""The real-time path: rules written in Python, run by JVM operators in Spark's Real-Time Mode.

``rules`` is the declarative rule API (no Spark needed to write rules), ``operator`` applies a
``RuleSet`` to a streaming DataFrame through the JVM rule operator built by ``make setup``.
"""

from headrace.realtime.errors import NotRealTimeError, RealtimeError, RuleError
from headrace.realtime.operator import (
    apply_rules,
    has_rule_operator,
    local_counters,
    python_operators,
    require_real_time,
)
from headrace.realtime.rules import (
    AboveProfile,
    Burst,
    Profile,
    Rule,
    RuleSet,
    Travel,
    WindowCount,
    WindowSum,
    compile_spec,
)

__all__ = [
    "AboveProfile",
    "Burst",
    "NotRealTimeError",
    "Profile",
    "RealtimeError",
    "Rule",
    "RuleError",
    "RuleSet",
    "Travel",
    "WindowCount",
    "WindowSum",
    "apply_rules",
    "compile_spec",
    "has_rule_operator",
    "local_counters",
    "python_operators",
    "require_real_time",
]
