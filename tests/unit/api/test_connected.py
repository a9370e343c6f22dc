"""Two-input jobs on the harness: the order inside a batch, broadcast state's access rules,
``apply_to_keyed_state``, rejected broadcast elements, and the job checks with their messages."""

from __future__ import annotations

import pytest

from sparkstate import (
    MIN_WATERMARK,
    Job,
    ListSource,
    ListStateDescriptor,
    MapStateDescriptor,
    MemorySink,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from sparkstate.api.connected import KeyedBroadcastProcessFunction, KeyedCoProcessFunction, ProcessJoinFunction
from sparkstate.api.ttl import StateTtlConfig
from sparkstate.errors import JobDefinitionError, StateAccessError, StateTypeError

RULES = MapStateDescriptor("rules", str, float)
COUNT = ValueStateDescriptor("count", int, default=0)
PAYMENTS = ListSource([[{"payer": "a", "amount": 5.0}]], schema="payer string, amount double")
RULE_SOURCE = ListSource([[{"name": "big", "limit": 3.0}]], schema="name string, limit double")
OUT = "payer string, rule string, n bigint"


class Limits(KeyedBroadcastProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(COUNT)

    def process_broadcast_element(self, rule, ctx):
        if rule["limit"] < 0:
            raise ValueError("a limit must not be negative")
        if rule.get("reset"):
            ctx.apply_to_keyed_state(COUNT, lambda key, state: state.clear())
        ctx.get_broadcast_state(RULES).put(rule["name"], rule["limit"])
        yield {"payer": None, "rule": f"+{rule['name']}", "n": 0}

    def process_element(self, p, ctx):
        self.count.update(self.count.value() + 1)
        for name, limit in sorted(ctx.get_broadcast_state(RULES).items()):
            if p["amount"] > limit:
                yield {"payer": ctx.get_current_key(), "rule": name, "n": self.count.value()}


def broadcast_job(fn=None) -> Job:
    return (
        Job("limits").source(PAYMENTS).key_by("payer").connect(RULE_SOURCE).broadcast(RULES)
        .process(fn or Limits(), output_schema=OUT).sink(MemorySink("limits"))
    )


def test_a_rule_applies_to_the_payments_of_its_own_batch_and_after():
    h = broadcast_job().harness()
    assert h.process_batch([{"payer": "a", "amount": 5.0}]) == []
    rows = h.process_batch([{"payer": "a", "amount": 5.0}], broadcast=[{"name": "big", "limit": 3.0}])
    assert rows == [{"payer": None, "rule": "+big", "n": 0}, {"payer": "a", "rule": "big", "n": 2}]
    assert h.process_batch([{"payer": "b", "amount": 4.0}]) == [{"payer": "b", "rule": "big", "n": 1}]
    assert h.broadcast_states == {"rules": {"big": 3.0}}


def test_apply_to_keyed_state_visits_every_key_with_a_value():
    h = broadcast_job().harness()
    h.process_batch([{"payer": "a", "amount": 1.0}, {"payer": "b", "amount": 1.0}, {"payer": "a", "amount": 1.0}])
    assert h.state("a") == {"count": 2} and h.state("b") == {"count": 1}
    h.process_batch([], broadcast=[{"name": "r", "limit": 1.0, "reset": True}])
    assert h.keys() == [], "clearing every key's only state leaves no key"


def test_a_rejected_rule_goes_to_the_dead_letters_and_changes_nothing():
    h = broadcast_job().harness()
    h.process_batch([], broadcast=[{"name": "big", "limit": 3.0}])
    rows = h.process_batch([{"payer": "a", "amount": 5.0}], broadcast=[{"name": "big", "limit": -1.0}])
    assert rows == [{"payer": "a", "rule": "big", "n": 1}], "the job goes on with the rules it had"
    (dead,) = h.side_output("dead_letters")
    assert "process_broadcast_element rejected it: ValueError: a limit must not be negative" in dead["reason"]
    assert '"limit": -1.0' in dead["raw"]
    assert h.broadcast_states == {"rules": {"big": 3.0}}


HISTORY = ListStateDescriptor("history", float)


class BumpsEveryKey(Limits):
    """A rule adds its limit to every key's count and history and sets each key a processing-time
    timer already due, all before the broadcast write; a rule named ``bad`` is then rejected."""

    def open(self, ctx):
        super().open(ctx)
        self.history = ctx.get_list_state(HISTORY)

    def process_broadcast_element(self, rule, ctx):
        def bump(key, count):
            count.update(count.value() + int(rule["limit"]))
            ctx.timer_service().register_processing_time_timer(0)

        ctx.apply_to_keyed_state(COUNT, bump)
        ctx.apply_to_keyed_state(HISTORY, lambda key, history: history.add(rule["limit"]))  # a list, changed in place
        ctx.get_broadcast_state(RULES).put(rule["name"], rule["limit"])
        if rule["name"] == "bad":
            raise ValueError("rejected after its writes")

    def process_element(self, p, ctx):
        self.count.update(self.count.value() + 1)
        self.history.add(p["amount"])
        yield {"payer": ctx.get_current_key(), "rule": ",".join(map(str, self.history.get())), "n": self.count.value()}

    def on_timer(self, timestamp, ctx):
        yield {"payer": ctx.get_current_key(), "rule": "timer", "n": self.count.value()}


def test_a_rejected_rule_undoes_its_keyed_writes_too():
    """Issue 32: a rejected element's ``apply_to_keyed_state`` writes are undone like its
    broadcast writes (Flink would fail and restore, which changes nothing), whether or not
    the batch had touched the key before it; an accepted element's stay."""
    h = broadcast_job(BumpsEveryKey()).harness()
    assert h.process_batch([{"payer": "a", "amount": 1.0}]) == [{"payer": "a", "rule": "1.0", "n": 1}]
    rows = h.process_batch([{"payer": "a", "amount": 2.0}], broadcast=[{"name": "bad", "limit": 10.0}])
    assert rows == [{"payer": "a", "rule": "1.0,2.0", "n": 2}]  # not 12, no 10.0, no timer
    (dead,) = h.side_output("dead_letters")
    assert "rejected it: ValueError: rejected after its writes" in dead["reason"]
    assert not h.broadcast_states.get("rules") and h.timers("a") == []
    # an accepted rule, then a rejected one in the same batch: the first's writes stay
    rows = h.process_batch([], broadcast=[{"name": "ok", "limit": 100.0}, {"name": "bad", "limit": 10.0}])
    assert rows == [{"payer": "a", "rule": "timer", "n": 102}]
    assert h.state("a") == {"count": 102, "history": [1.0, 2.0, 100.0]}
    assert h.broadcast_states == {"rules": {"ok": 100.0}}


class WritesOnTheKeyedSide(Limits):
    def process_element(self, p, ctx):
        ctx.get_broadcast_state(RULES).put("mine", 1.0)


def test_process_element_may_not_write_broadcast_state():
    h = broadcast_job(WritesOnTheKeyedSide()).harness()
    with pytest.raises(Exception) as info:
        h.process_batch([{"payer": "a", "amount": 5.0}])
    assert isinstance(info.value.__cause__, StateAccessError) or isinstance(info.value, StateAccessError)
    assert "read-only here" in str(info.value) and "process_broadcast_element" in str(info.value)


class WrongType(Limits):
    def process_broadcast_element(self, rule, ctx):
        ctx.get_broadcast_state(RULES).put(rule["name"], "not a float")


def test_a_broadcast_write_of_the_wrong_type_is_a_rejected_rule():
    h = broadcast_job(WrongType()).harness()
    h.process_batch([], broadcast=[{"name": "big", "limit": 3.0}])
    (dead,) = h.side_output("dead_letters")
    assert "StateTypeError" in dead["reason"] and "'rules'" in dead["reason"]
    assert h.broadcast_states == {"rules": {}} or h.broadcast_states == {}
    assert issubclass(StateTypeError, Exception)


class UndeclaredRead(Limits):
    def process_element(self, p, ctx):
        ctx.get_broadcast_state(MapStateDescriptor("other", str, float)).get("x")


def test_reading_an_undeclared_broadcast_state_names_the_declared_ones():
    h = broadcast_job(UndeclaredRead()).harness()
    with pytest.raises(Exception, match=r"not a broadcast state of this job \(declared: 'rules'\)"):
        h.process_batch([{"payer": "a", "amount": 5.0}])


class Enrich(KeyedCoProcessFunction):
    def open(self, ctx):
        self.name = ctx.get_state(ValueStateDescriptor("name", str))

    def process_element1(self, payment, ctx):
        yield {"merchant": ctx.get_current_key(), "name": self.name.value(), "amount": payment["amount"]}

    def process_element2(self, profile, ctx):
        self.name.update(profile["name"])


def test_the_second_keyed_input_runs_first_in_a_batch_and_shares_the_key():
    job = (
        Job("enrich").source(ListSource([[{"m": "x", "amount": 1.0}]], schema="m string, amount double")).key_by("m")
        .connect(ListSource([[{"id": "x", "name": "X"}]], schema="id string, name string"), key_by="id")
        .process(Enrich(), output_schema="merchant string, name string, amount double").sink(MemorySink("e"))
    )
    h = job.harness()
    assert h.process_batch([{"m": "x", "amount": 1.0}]) == [{"merchant": "x", "name": None, "amount": 1.0}]
    rows = h.process_batch([{"m": "x", "amount": 2.0}], second=[{"id": "x", "name": "X"}])
    assert rows == [{"merchant": "x", "name": "X", "amount": 2.0}]
    assert h.state("x") == {"name": "X"}


class Quiet(KeyedCoProcessFunction):
    def process_element1(self, value, ctx):
        return None

    def process_element2(self, value, ctx):
        return None


def test_the_watermark_of_two_inputs_is_the_smaller_and_waits_for_both():
    wm = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts")
    job = (
        Job("two").source(ListSource([[{"k": "a", "ts": 1}]], schema="k string, ts bigint"), watermark=wm).key_by("k")
        .connect(ListSource([[{"k": "a", "ts": 1}]], schema="k string, ts bigint"), key_by="k", watermark=wm)
        .process(Quiet(), output_schema="merchant string, name string, amount double").sink(MemorySink("w"))
    )
    h = job.harness()
    h.process_batch([{"k": "a", "ts": 1000}])
    assert h.watermark == MIN_WATERMARK, "the second input has seen no event: it holds the watermark at MIN (Flink)"
    h.process_batch([{"k": "a", "ts": 5000}], second=[{"k": "a", "ts": 2000}])
    assert h.watermark == 1999
    h.process_batch([], second=[{"k": "a", "ts": 1500}])
    assert h.watermark == 1999, "a watermark never goes back"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda j: j.broadcast(RULES), r"broadcast\(\.\.\.\) needs a second input"),
        (lambda j: j.connect(RULE_SOURCE).broadcast(ValueStateDescriptor("r", float)), "must be a MapStateDescriptor"),
        (lambda j: j.connect(RULE_SOURCE).broadcast(
            MapStateDescriptor("r", str, float).enable_time_to_live(StateTtlConfig.new_builder(1000).build())),
         "broadcast state does not expire"),
        (lambda j: j.connect(RULE_SOURCE).broadcast(RULES, MapStateDescriptor("rules", str, str)), "two broadcast states"),
        (lambda j: j.connect(RULE_SOURCE, key_by="name").broadcast(RULES), "a broadcast input has no key"),
        (lambda j: j.connect(RULE_SOURCE).connect(RULE_SOURCE), "already has a second input"),
        (lambda j: j.between(0, 1), r"follows \.interval_join"),
        (lambda j: j.interval_join(RULE_SOURCE, key_by="name", watermark=None), "runs on event time"),
    ],
)
def test_two_input_declarations_refused_with_what_and_why(build, message):
    with pytest.raises(JobDefinitionError, match=message):
        build(Job("j").source(PAYMENTS).key_by("payer"))


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (lambda: Job("j").source(PAYMENTS).key_by("payer").process(Limits(), output_schema=OUT),
         "needs a broadcast input"),
        (lambda: Job("j").source(PAYMENTS).key_by("payer").process(Enrich(), output_schema=OUT),
         "needs a second keyed input"),
        (lambda: Job("j").source(PAYMENTS).key_by("payer").connect(RULE_SOURCE).broadcast(RULES)
         .process(Enrich(), output_schema=OUT), "must be a KeyedBroadcastProcessFunction"),
        (lambda: Job("j").source(PAYMENTS).key_by("payer").connect(RULE_SOURCE, key_by="name")
         .process(Limits(), output_schema=OUT), "must be a KeyedCoProcessFunction"),
        (lambda: Job("j").source(PAYMENTS).key_by("payer").connect(RULE_SOURCE, key_by=("name", "limit"))
         .process(Enrich(), output_schema=OUT), "same shape"),
        (lambda: Job("j").source(PAYMENTS).key_by("payer").connect(RULE_SOURCE)
         .process(Limits(), output_schema=OUT), r"needs key_by=\.\.\. .* or \.broadcast"),
    ],
)
def test_a_function_that_does_not_fit_its_inputs_is_refused_by_validate(job, message):
    with pytest.raises(JobDefinitionError, match=message):
        job().sink(MemorySink("j")).validate()


def test_process_join_function_is_a_plain_class_with_flinks_method():
    assert hasattr(ProcessJoinFunction, "process_element")
