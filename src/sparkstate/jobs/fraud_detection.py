"""Fraud detection per payer: keyed state for the payments, broadcast state for the rules.

Seed 003's pattern 1 (``FraudDetector``) and seed 004's rule, as a
:class:`~sparkstate.api.connected.KeyedBroadcastProcessFunction` keyed by ``payer_id``:

* ``velocity`` - the payment is the 5th or later of the payer within 10 minutes of event time:
  it counts itself and the payer's earlier-arrived payments whose time ``t`` satisfies
  ``ts - t < 10 min`` (seed 003's test, which also counts a payment that arrived earlier with
  a later time). A payment leaves the list once it is 10 minutes or more before the
  watermark ``W``: a payment not behind the watermark has ``ts > W`` and can no longer count
  it. Pruning against the payment's own time instead would drop payments that a later-arriving
  payment with an earlier time still counts, so disorder within the watermark's bound would
  lose alerts. A payment behind the watermark (late beyond the bound) counts what is left.
* ``amount-spike`` - the amount is more than 10 times the payer's running average of the
  payments before it, once the payer has made at least 3 payments (the seed's profile starts
  at an average of 0, which would make every first payment a spike).
* the *broadcast rules* (:class:`Rule`), read from a rules source while the job runs: each
  names an amount above which it fires, and optionally "from a device new to the payer"
  and hours of the day (UTC). Seed 004: "block any UPI payment > 50,000 from a new device".
  A device is new to the payer when the payer's profile has not seen it (a payer's first
  payment is from a new device).

Every alert names the rule that fired (``rule``), its ``action`` (``alert`` or ``block``) and
what was seen (``detail``); a payment that breaks several rules raises one alert for each:
velocity, amount spike, then the broadcast rules in the order they first arrived.

State: ``profile`` (:class:`Profile`: payments, total, devices seen) with a 90-day TTL;
``recent`` (the event times of the payments after ``W - 10 min``: about 10 minutes, the
watermark's bound and a micro-batch's span) with a 24-hour TTL, so a payer who goes quiet
leaves no state behind.

When a rule applies: the engine runs a micro-batch's broadcast elements before its payments
(``sparkstate.api.connected``), so a rule applies from the micro-batch that reads it: to every
payment of that batch (also those that arrived before the rule) and of every later batch. A
rule the function cannot read (:meth:`Rule.from_element` raises :class:`RuleError`) goes to the
``dead_letters`` side output with the reason, and the job goes on with the rules it had.

Rules sources (``sparkstate run fraud-detection --rules ...``; see :func:`rules_source`):

* a folder of JSON-lines files (``FileSource``): a file written into it while the job runs
  is read by the next micro-batch. Spark logs the files of each micro-batch in the
  checkpoint, so a replayed batch reads the same rules: **exactly-once**, if each file is
  complete when it appears (write it elsewhere, then move it in) and never changed after.
* a socket (``SocketSource``, ``socket://HOST:PORT``): **at-most-once**: rules sent while
  the job is down, or in a batch that failed, are lost (the rules the checkpoint holds stay).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import Any

from sparkstate.api.connected import BroadcastContext, KeyedBroadcastProcessFunction
from sparkstate.api.functions import Context, KeyedProcessFunction, RuntimeContext
from sparkstate.api.state import ListState, ListStateDescriptor, MapStateDescriptor, ValueState, ValueStateDescriptor
from sparkstate.api.time import WatermarkStrategy
from sparkstate.api.ttl import StateTtlConfig
from sparkstate.connectors.generator import FraudPayments, UpiPayments
from sparkstate.connectors.sinks import NoopSink
from sparkstate.connectors.sources import FileSource, ListSource
from sparkstate.errors import JobDefinitionError, SparkStateError
from sparkstate.job import Job
from sparkstate.jobs.registry import SeedJob

OUTPUT = (
    "event_time timestamp, payer_id string, merchant_id string, amount double, device string, "
    "rule string, action string, detail string"
)
#: the columns of a rule in a rules file or on a socket (one JSON object per line)
RULE_SCHEMA = (
    "rule_id string, min_amount double, new_device boolean, from_hour int, to_hour int, action string, active boolean"
)
ACTIONS = ("alert", "block")

VELOCITY_COUNT = 5
VELOCITY_WINDOW_MS = 10 * 60 * 1000
SPIKE_FACTOR = 10.0
#: payments a payer needs before a spike can be judged against its average
SPIKE_MIN_HISTORY = 3

PROFILE_TTL = StateTtlConfig.new_builder(timedelta(days=90)).build()
RECENT_TTL = StateTtlConfig.new_builder(timedelta(hours=24)).build()

#: seed 004's rule, the rule a new rules folder starts with
SEED_RULE = {"rule_id": "big-payment-new-device", "min_amount": 50_000.0, "new_device": True, "action": "block"}


class RuleError(SparkStateError, ValueError):
    """A rule element that is not a rule (the job sends it to the dead letters)."""


@dataclass(frozen=True)
class Rule:
    """A broadcast rule: fires on a payment above ``min_amount`` that meets every condition
    given (``new_device``: from a device new to the payer; ``from_hour``/``to_hour``: the
    payment's UTC hour in ``[from_hour, to_hour)``, wrapping past midnight when
    ``from_hour > to_hour``). ``action`` is what the alert asks for.

    Example::

        >>> rule = Rule("big-new-device", min_amount=50_000, new_device=True, action="block")
        >>> rule.matches(60_000.0, new_device=True, hour=3), rule.matches(60_000.0, new_device=False, hour=3)
        (True, False)
    """

    rule_id: str
    min_amount: float = 0.0
    new_device: bool = False
    from_hour: int | None = None
    to_hour: int | None = None
    action: str = "alert"

    def __post_init__(self) -> None:
        where = f"rule {self.rule_id!r}"
        if not isinstance(self.rule_id, str) or not self.rule_id.strip():
            raise RuleError(f"a rule needs a rule_id (a non-empty string), got {self.rule_id!r}")
        amount = self.min_amount
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
            raise RuleError(f"{where}: min_amount must be a number >= 0, got {amount!r}")
        if not isinstance(self.new_device, bool):
            raise RuleError(f"{where}: new_device must be true or false, got {self.new_device!r}")
        if (self.from_hour is None) != (self.to_hour is None):
            raise RuleError(f"{where}: give both from_hour and to_hour (UTC hours, e.g. 0 and 6), or neither")
        if self.from_hour is not None:
            for name in ("from_hour", "to_hour"):
                h = getattr(self, name)
                if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= 23:
                    raise RuleError(f"{where}: {name} must be an hour 0-23 (UTC), got {h!r}")
            if self.from_hour == self.to_hour:
                raise RuleError(f"{where}: from_hour and to_hour are both {self.from_hour}; the hours would be empty")
        if self.action not in ACTIONS:
            raise RuleError(f"{where}: action must be one of {', '.join(ACTIONS)}, got {self.action!r}")
        if self.min_amount == 0 and not self.new_device and self.from_hour is None:
            raise RuleError(
                f"{where} has no condition and would fire on every payment: give min_amount, new_device or from_hour/to_hour"
            )

    @classmethod
    def from_element(cls, element: Any) -> tuple[str, Rule | None]:
        """``(rule_id, rule)`` from a rules-source element (a dict of :data:`RULE_SCHEMA`);
        the rule is None when the element removes the rule (``"active": false``). Missing
        (null) fields take their defaults; anything else wrong raises :class:`RuleError`."""
        if not isinstance(element, dict):
            raise RuleError(f"a rule is a JSON object with the fields {RULE_SCHEMA}, got {element!r}")
        known = {f.name for f in fields(cls)} | {"active"}
        unknown = sorted(set(element) - known)
        if unknown:
            raise RuleError(f"rule {element.get('rule_id')!r}: unknown field(s) {', '.join(unknown)}; a rule has {RULE_SCHEMA}")
        given = {k: v for k, v in element.items() if v is not None and k != "active"}
        active = element.get("active")
        rule_id = given.get("rule_id")
        if active is False:
            if not isinstance(rule_id, str) or not rule_id.strip():
                raise RuleError(f"a rule removal (active: false) needs the rule_id to remove, got {rule_id!r}")
            return rule_id, None
        if rule_id is None:
            raise RuleError(f"a rule needs a rule_id (a non-empty string), got none in {element!r}")
        if active not in (None, True):
            raise RuleError(f"rule {element.get('rule_id')!r}: active must be true or false, got {active!r}")
        if isinstance(given.get("min_amount"), int) and not isinstance(given["min_amount"], bool):
            given["min_amount"] = float(given["min_amount"])
        rule = cls(**given)
        return rule.rule_id, rule

    def matches(self, amount: float, new_device: bool, hour: int) -> bool:
        """Whether a payment of ``amount`` (from a device new to the payer or not, at ``hour``
        UTC) breaks this rule."""
        if amount <= self.min_amount or (self.new_device and not new_device):
            return False
        if self.from_hour is None or self.to_hour is None:
            return True
        if self.from_hour < self.to_hour:
            return self.from_hour <= hour < self.to_hour
        return hour >= self.from_hour or hour < self.to_hour

    def describe(self) -> str:
        parts = [f"amount > {self.min_amount:,.2f}"]
        if self.new_device:
            parts.append("new device")
        if self.from_hour is not None:
            parts.append(f"{self.from_hour:02d}:00-{self.to_hour:02d}:00 UTC")
        return " and ".join(parts)


@dataclass(frozen=True)
class Profile:
    """What the job knows of a payer: payments so far, their total, the devices seen."""

    payments: int = 0
    total: float = 0.0
    devices: frozenset[str] = field(default_factory=frozenset)

    @property
    def average(self) -> float:
        return self.total / self.payments if self.payments else 0.0

    def add(self, amount: float, device: str) -> Profile:
        return Profile(self.payments + 1, self.total + amount, self.devices | {device})


RULES: MapStateDescriptor[str, Rule] = MapStateDescriptor("rules", str, Rule)


class PayerChecks(KeyedProcessFunction):
    """The keyed part alone: velocity and amount spike per payer, no rules (a baseline for the
    cost of the broadcast input; :class:`FraudDetector` adds the rules)."""

    def open(self, ctx: RuntimeContext) -> None:
        profile: ValueStateDescriptor[Profile] = ValueStateDescriptor("profile", Profile)
        profile.enable_time_to_live(PROFILE_TTL)
        recent: ListStateDescriptor[int] = ListStateDescriptor("recent", int)
        recent.enable_time_to_live(RECENT_TTL)
        self.profile: ValueState[Profile] = ctx.get_state(profile)
        self.recent: ListState[int] = ctx.get_list_state(recent)

    def rules(self, ctx: Context) -> list[tuple[str, Rule]]:
        """The rules in force (none here)."""
        return []

    def process_element(self, payment: dict, ctx: Context):
        ts = ctx.timestamp()
        assert ts is not None  # the job has event time, so every payment has a timestamp
        amount, device = payment["amount"], payment["device"]

        def alert(rule: str, action: str, detail: str) -> dict:
            return {"event_time": payment["event_time"], "payer_id": ctx.get_current_key(),
                    "merchant_id": payment["merchant_id"], "amount": amount, "device": device,
                    "rule": rule, "action": action, "detail": detail}

        recent = self.recent.get()
        within = 1 + sum(1 for t in recent if ts - t < VELOCITY_WINDOW_MS)
        if within >= VELOCITY_COUNT:
            yield alert("velocity", "alert", f"{within} payments in 10 minutes")
        prof = self.profile.value() or Profile()
        if prof.payments >= SPIKE_MIN_HISTORY and amount > SPIKE_FACTOR * prof.average:
            ratio = amount / prof.average
            yield alert("amount-spike", "alert", f"{amount:,.2f} is {ratio:,.1f}x the average {prof.average:,.2f}")
        new_device = device not in prof.devices
        hour = ts // 3_600_000 % 24  # UTC
        # in the order the rules arrived (the same in every key group, and after a restore)
        for rule_id, rule in self.rules(ctx):
            if amount > rule.min_amount and rule.matches(amount, new_device, hour):
                yield alert(rule_id, rule.action, rule.describe())
        self.profile.update(prof.add(amount, device))
        # keep what a payment not behind the watermark (ts' > W) may still count: t > W - 10 min
        horizon = ctx.timer_service().current_watermark() - VELOCITY_WINDOW_MS
        self.recent.update([t for t in (*recent, ts) if t > horizon])


class FraudDetector(PayerChecks, KeyedBroadcastProcessFunction):
    """Velocity, amount spike and the broadcast rules, per payer (see the module's doc)."""

    def process_broadcast_element(self, element: Any, ctx: BroadcastContext) -> None:
        rule_id, rule = Rule.from_element(element)
        rules = ctx.get_broadcast_state(RULES)
        if rule is None:
            rules.remove(rule_id)
        else:
            rules.put(rule_id, rule)

    def rules(self, ctx: Context) -> list[tuple[str, Rule]]:
        return ctx.get_broadcast_state(RULES).items()


def payment_watermark(source: UpiPayments) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=source.max_out_of_orderness_ms))


def default_rules() -> ListSource:
    """Seed 004's rule, as a one-batch list source (what a job built without a rules source reads)."""
    return ListSource([[SEED_RULE]], schema=RULE_SCHEMA, end_of_input=False, name="rules")


def rules_source(spec: str) -> Any:
    """A rules source from a CLI string: a folder (``DIR`` or ``file:DIR``) of JSON-lines rule
    files, or ``socket://HOST:PORT``."""
    from sparkstate.connectors.sources import parse_source

    if "://" not in spec and not spec.startswith("file:"):
        spec = f"file:{spec}"
    source = parse_source(spec, RULE_SCHEMA)
    if isinstance(source, FileSource):
        if source.format != "json":
            raise JobDefinitionError(f"--rules {spec!r}: rule files are JSON lines; drop ?format=")
        if "://" not in source.path and not Path(source.path).is_dir():
            raise JobDefinitionError(
                f"--rules {spec!r}: {source.path} is not a folder; create it (rule files are read as they appear in it)"
            )
    return source


def build(source: UpiPayments, rules: Any = None) -> Job:
    return (
        Job("fraud-detection").source(source, watermark=payment_watermark(source)).key_by("payer_id")
        .connect(rules if rules is not None else default_rules()).broadcast(RULES)
        .process(FraudDetector(), output_schema=OUTPUT).sink(NoopSink())
    )


SEED_JOB = SeedJob(
    name="fraud-detection",
    seed="003/004",
    description="velocity, amount spike and rules that change while it runs, per payer (broadcast state, TTL)",
    build=build,
    generator=FraudPayments,
    summary_key="payer_id",
    summary_order="amount",
    rules_schema=RULE_SCHEMA,
    initial_rules=(SEED_RULE,),
    rules_source=rules_source,
)
