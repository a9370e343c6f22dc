"""Flink's upgrade rules on restore (savepoint/compat.py): which states a restored job keeps,
which are new, and every refusal, each with what its message must say."""

from __future__ import annotations

import random

import pytest
from savepoint_helpers import job_meta

from sparkstate.api.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from sparkstate.errors import SavepointError, StateMigrationError
from sparkstate.savepoint.compat import check_restore

TOTAL = ValueStateDescriptor("total", int, default=0)
SEEN = ListStateDescriptor("seen", str)
LAST = MapStateDescriptor("last", str, int)
WHERE = "/sp/payments-b000003"


def check(saved, now, **kw):
    meta = job_meta(saved, **{k: v for k, v in kw.items() if k in ("job", "function", "key_columns", "key_groups")})
    new = job_meta(now, **{k[4:]: v for k, v in kw.items() if k.startswith("new_")})
    return check_restore(meta, new, now, where=WHERE,
                         allow_non_restored_state=kw.get("allow_non_restored_state", False))


def test_the_same_job_keeps_every_state_as_it_is():
    plan, notes = check([TOTAL, SEEN, LAST], [TOTAL, SEEN, LAST])
    assert plan.keep == ("last", "seen", "total")
    assert plan.converters == {} and notes == []


def test_the_function_may_change_even_its_class_name():
    plan, notes = check([TOTAL], [TOTAL], function="RunningSum", new_function="RunningSumV2")
    assert plan.keep == ("total",)
    assert any("RunningSum to RunningSumV2" in n and "job's name" in n for n in notes)


def test_an_added_state_starts_empty():
    plan, notes = check([TOTAL], [TOTAL, SEEN])
    assert plan.keep == ("total",)
    assert notes == ["state 'seen' (ListState[str]) is new: it starts empty"]


def test_a_removed_state_is_refused_listing_the_states_left_behind():
    with pytest.raises(StateMigrationError) as err:
        check([TOTAL, SEEN, LAST], [TOTAL])
    msg = str(err.value)
    assert WHERE in msg and "no longer declares" in msg
    assert "'last' (MapState[str, int])" in msg and "'seen' (ListState[str])" in msg
    assert "--allow-non-restored-state" in msg and "allow_non_restored_state=True" in msg
    assert "renamed" not in msg
    assert isinstance(err.value, SavepointError)


def test_a_removed_state_is_dropped_when_the_user_allows_it():
    plan, notes = check([TOTAL, SEEN], [TOTAL], allow_non_restored_state=True)
    assert plan.keep == ("total",)
    assert notes == ["state 'seen' (ListState[str]) from the savepoint is dropped: the job no longer declares it"]


def test_a_renamed_state_is_refused_naming_the_old_and_the_new_name():
    with pytest.raises(StateMigrationError) as err:
        check([TOTAL, SEEN], [ValueStateDescriptor("sum", int), SEEN])
    msg = str(err.value)
    assert "'total' -> 'sum'" in msg and "renamed" in msg and "keep the old name" in msg
    assert "--allow-non-restored-state" in msg


def test_a_rename_is_paired_by_signature_first_then_by_kind():
    saved = [TOTAL, ValueStateDescriptor("label", str)]
    now = [ValueStateDescriptor("name", str), ValueStateDescriptor("amount", float)]
    with pytest.raises(StateMigrationError) as err:
        check(saved, now)
    assert "'label' -> 'name'; 'total' -> 'amount'" in str(err.value)


def test_a_changed_kind_is_refused_naming_both_signatures():
    with pytest.raises(StateMigrationError) as err:
        check([TOTAL], [ListStateDescriptor("total", int)])
    msg = str(err.value)
    assert "'total' was ValueState[int]" in msg and "ListState[int]" in msg and "kind" in msg
    assert "another name" in msg


def test_a_savepoint_of_another_job_is_refused():
    with pytest.raises(StateMigrationError) as err:
        check([TOTAL], [TOTAL], job="orders", new_job="payments")
    msg = str(err.value)
    assert "savepoint of job 'orders', not of 'payments'" in msg and "keep its old name 'orders'" in msg


def test_other_key_columns_are_refused():
    with pytest.raises(StateMigrationError) as err:
        check([TOTAL], [TOTAL], key_columns=("merchant_id",), new_key_columns=("payer",))
    msg = str(err.value)
    assert "['merchant_id']" in msg and "['payer']" in msg and "key the job by ['merchant_id']" in msg


def test_a_different_number_of_key_groups_is_refused_with_the_reason_and_the_fix():
    with pytest.raises(StateMigrationError) as err:
        check([TOTAL], [TOTAL], key_groups=256, new_key_groups=128)
    msg = str(err.value)
    assert "256 key groups and the job 128" in msg and "max parallelism" in msg
    assert "--key-groups 256" in msg and "with_settings(key_groups=256)" in msg and "any number of partitions" in msg


def test_all_identity_problems_are_listed_at_once():
    with pytest.raises(StateMigrationError) as err:
        check([TOTAL], [TOTAL], job="a", new_job="b", key_groups=4, new_key_groups=8)
    assert "job 'a'" in str(err.value) and "4 key groups" in str(err.value)


def test_a_window_jobs_windows_state_is_kept_as_saved():
    windows = MapStateDescriptor("windows", tuple, object)
    plan, notes = check([windows], [windows], function="WindowFunction", new_function="WindowFunction")
    assert plan.keep == ("windows",) and plan.converters == {} and notes == []


class _Avg(AggregateFunction):
    def create_accumulator(self):
        return (0.0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]


class _Avg2(_Avg):
    pass


def test_an_aggregating_states_function_may_change_and_its_accumulator_migrate():
    saved = [AggregatingStateDescriptor("avg", _Avg(), int)]
    now = [AggregatingStateDescriptor("avg", _Avg2(), float)]
    plan, notes = check(saved, now)
    assert plan.converters["avg"](3) == 3.0 and type(plan.converters["avg"](3)) is float
    assert notes == ["state 'avg': values migrate from AggregatingState[_Avg, int] to AggregatingState[_Avg2, float]"]


def test_a_reducing_state_int_to_float_migrates():
    plan, _ = check([ReducingStateDescriptor("max", max, int)], [ReducingStateDescriptor("max", max, float)])
    assert plan.converters["max"](7) == 7.0


def test_a_map_states_key_type_change_is_refused():
    with pytest.raises(StateMigrationError) as err:
        check([LAST], [MapStateDescriptor("last", int, int)])
    msg = str(err.value)
    assert "'last'" in msg and "map keys were str" in msg and "declares int" in msg


def test_a_map_state_keyed_by_object_now_takes_any_saved_keys():
    plan, _ = check([LAST], [MapStateDescriptor("last", object, int)])
    assert "last" not in plan.converters


# ------------------------------------------------------------------ an independent model


def _model(saved: dict[str, str], declared: dict[str, str], allow: bool):
    """Flink's rules for operator state on restore, written down from its documentation:
    states are matched by name; a saved state without a match fails the restore unless
    non-restored state is allowed; a declared state without a match starts empty; a matched
    state must keep its kind."""
    left = set(saved) - set(declared)
    if left and not allow:
        return "refused"
    if any(saved[n] != declared[n] for n in set(saved) & set(declared)):
        return "refused"
    return tuple(sorted(set(saved) & set(declared)))


KINDS = {
    "value": lambda n: ValueStateDescriptor(n, int),
    "list": lambda n: ListStateDescriptor(n, int),
    "map": lambda n: MapStateDescriptor(n, str, int),
}


@pytest.mark.parametrize("seed", range(200))
def test_which_states_are_restored_follows_flinks_rules(seed):
    rnd = random.Random(seed)
    names = ["a", "b", "c", "d", "e"]
    saved = {n: rnd.choice(list(KINDS)) for n in rnd.sample(names, rnd.randint(0, 5))}
    declared = {n: rnd.choice([saved.get(n, "value"), rnd.choice(list(KINDS))])
                for n in rnd.sample(names, rnd.randint(0, 5))}
    allow = rnd.random() < 0.5
    expected = _model(saved, declared, allow)
    try:
        plan, _ = check([KINDS[k](n) for n, k in saved.items()], [KINDS[k](n) for n, k in declared.items()],
                        allow_non_restored_state=allow)
        got: object = plan.keep
    except StateMigrationError:
        got = "refused"
    assert got == expected


def test_a_map_state_keyed_by_a_generic_alias_keeps_its_keys():
    windows = MapStateDescriptor("panes", tuple[int, int], float)
    plan, notes = check([windows], [windows])
    assert plan.keep == ("panes",) and notes == []


def test_a_dropped_state_that_looks_renamed_says_the_new_one_starts_empty():
    _, notes = check([TOTAL], [ValueStateDescriptor("sum", int)], allow_non_restored_state=True)
    assert "state 'total' (ValueState[int]) from the savepoint is dropped: the job no longer declares it " \
           "(if it was renamed to 'sum', that one starts empty)" in notes


def _windows(saved: dict, now: dict):
    from sparkstate.savepoint.compat import _check_windows

    return _check_windows(saved, now, WHERE)


TUMBLING = {"assigner": "tumbling event-time windows of 60000 ms", "sessions": False, "kind": "aggregate",
            "function": "BuiltinAggregates[count(*), sum(amount)]"}


def test_a_window_job_may_change_its_window_size_with_a_note():
    notes = _windows(TUMBLING, {**TUMBLING, "assigner": "tumbling event-time windows of 120000 ms"})
    assert len(notes) == 1 and "keep their bounds" in notes[0] and "120000" in notes[0]
    assert _windows(TUMBLING, dict(TUMBLING)) == []


@pytest.mark.parametrize("change, says", [
    ({"sessions": True, "assigner": "event-time session windows with a gap of 30000 ms"}, "keep their state differently"),
    ({"function": "BuiltinAggregates[count(*)]"}, "accumulators would not fit"),
    ({"kind": "reduce", "function": "function"}, "accumulators would not fit"),
])
def test_a_window_job_may_not_change_what_its_windows_keep(change, says):
    with pytest.raises(StateMigrationError) as err:
        _windows(TUMBLING, {**TUMBLING, **change})
    assert WHERE in str(err.value) and says in str(err.value) and "as it was" in str(err.value)


def test_the_window_identity_a_checkpoint_records_names_the_aggregates():
    from sparkstate.jobs import get_job
    from sparkstate.runtime.checkpoint.metadata import window_identity

    upi = window_identity(get_job("upi-per-minute").job(events=10))
    assert upi == TUMBLING
    assert window_identity(get_job("sessions").job(events=10))["sessions"] is True
    assert window_identity(get_job("running-sum").job(events=10)) is None
