"""The rule for the job configuration's key names, checked over the whole config model.

Every key is snake_case (``watermark_delay``, ``max_event_time_per_trigger``). A key that is
also an option of the data source it configures -- Spark's own (``maxOffsetsPerTrigger``,
``failOnDataLoss``) or a kappaplus source's (``maxEventTimePerTrigger``,
``targetRowsPerTrigger``) -- is accepted in that source's camelCase spelling too, as an alias,
exactly as the source spells it. No other key has a second spelling (``from`` aside: a Python
keyword). The rule is written down in ``docs/runtime.md`` ("Key names") and on
:class:`kappaplus.config.fields.StrictModel`.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import kappaplus.config
from kappaplus.config.fields import StrictModel
from kappaplus.connectors.kafka.options import KafkaSourceOptions
from kappaplus.connectors.lake.options import LakeSourceOptions
from kappaplus.core.options.declared import options_of

SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
KEYWORD_ALIASES = {"from_": "from"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _models() -> list[type[StrictModel]]:
    for module in pkgutil.walk_packages(kappaplus.config.__path__, "kappaplus.config."):
        importlib.import_module(module.name)
    found: list[type[StrictModel]] = []
    todo = [StrictModel]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


SOURCE_OPTIONS = {o.key for cls in (LakeSourceOptions, KafkaSourceOptions) for o in options_of(cls)}


def test_every_key_is_snake_case_with_only_source_options_in_camel_case() -> None:
    models = _models()
    assert len(models) > 20
    wrong = []
    for model in models:
        for name, info in model.model_fields.items():
            where = f"{model.__name__}.{name}"
            alias = info.alias
            if name in KEYWORD_ALIASES:
                if alias != KEYWORD_ALIASES[name]:
                    wrong.append(f"{where}: alias {alias!r}")
                continue
            if not SNAKE.match(name):
                wrong.append(f"{where}: not snake_case")
            if alias is None:
                continue
            if alias != _camel(name):
                wrong.append(f"{where}: alias {alias!r} is not the camelCase of the key")
            elif alias not in SOURCE_OPTIONS:
                wrong.append(f"{where}: alias {alias!r} is not an option of a source")
    assert wrong == []


def test_the_camel_case_spellings_are_accepted() -> None:
    from kappaplus.config.bindings import SliceBudgets

    budgets = SliceBudgets.model_validate({"maxEventTimePerTrigger": "2 hours"})
    assert budgets == SliceBudgets.model_validate({"max_event_time_per_trigger": "2 hours"})
