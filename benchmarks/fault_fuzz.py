"""The fault script's fuzz section: a million hostile messages through every decoder, in process.

    .venv/bin/python benchmarks/faults.py --only fuzz [--fuzz-messages N] [--seed S]

Each message is one of a protocol's valid messages (built with the stand-in encoders for every decoder
configuration: Simple JSON and Avro, TiCDC avro with the registry emulator, debezium with and without
inline schemas, canal-json, open-protocol, lz4/snappy values, claim-check references) spoiled by one
mutation: random bytes, a truncation, changed bytes, its JSON/Avro/framing structurally spoiled, its
claim-check file or registry schema replaced by garbage (`tests/hostile.py`, the same mutations the
property-based tests use, here driven by `random.Random(seed)`; no hypothesis needed). Decoders are
long-lived, so hostile messages also meet each other's leftovers in the schema caches; every
`--fuzz-reset-every` messages a protocol gets a fresh decoder that has read its valid stream.

Prints per protocol and in total: messages, decoded OK, typed DecodeError, crashes (any other
exception, or a decode call over the time bound), unappliable (decoded, but an event whose values do
not fit their columns: `tests.hostile.problems`) and decode throughput; the first few crashes with a
traceback summary. Fails (returns False) on any crash or unappliable event. No Spark, no Kafka.
"""

from __future__ import annotations

import argparse
import logging
import random
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests import hostile
from tests.registry_server import FakeSchemaRegistry
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.schema_cache.events import RawMessage

# How often each mutation is picked (where it applies). The cheap byte-level ones dominate so a million
# messages stay within minutes; structural ones (JSON/Avro re-encoding, 1 MiB fields, 100k-deep nesting)
# cost more; registry garbage makes an HTTP round trip to the emulator, claim-check garbage writes a file.
WEIGHTS = {
    "random-bytes": 20,
    "truncated": 20,
    "byte-changed": 30,
    "structural": 27,
    "claim-check-file": 3,
    "registry-garbage": 3,
}
OUTCOMES = ("ok", "decode_error", "crash", "unappliable")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fuzz")
    group.add_argument("--fuzz-messages", type=int, default=1_000_000, help="hostile messages in all (default 1,000,000)")
    group.add_argument(
        "--fuzz-reset-every", type=int, default=2_000, help="hostile messages a decoder reads before a fresh one replaces it"
    )
    group.add_argument("--fuzz-show-crashes", type=int, default=3, help="crashes printed with a traceback summary")
    # A 1 MiB field (the unit tests' size) costs about 3 ms to build and decode, most of the run at a
    # million messages; 64 KiB is still a thousand times a typical column value.
    group.add_argument(
        "--fuzz-oversized-bytes", type=int, default=64 * 1024, help="size of the oversized fields structural mutations write"
    )


@dataclass
class Tally:
    outcomes: Counter = field(default_factory=Counter)
    decode_seconds: float = 0.0

    @property
    def messages(self) -> int:
        return sum(self.outcomes.values())


@dataclass
class Failure:
    case: str
    mutation: str
    message: RawMessage
    summary: str


class Fuzzer:
    def __init__(self, cases: dict[str, hostile.Case], rng: random.Random, reset_every: int, show: int) -> None:
        self._cases = cases
        self._rng = rng
        self._chooser = hostile.RandomChooser(rng)
        self._reset_every = reset_every
        self._show = show
        self._decoders = {name: self._fresh(case) for name, case in cases.items()}
        self._since_reset = Counter()
        self.by_case = {name: Tally() for name in cases}
        self.by_mutation = {name: Counter() for name in WEIGHTS}
        # the first few of each kind that must not happen (crash, unappliable), kept apart so one kind cannot hide another
        self.failures: dict[str, list[Failure]] = {"crash": [], "unappliable": []}

    @staticmethod
    def _fresh(case: hostile.Case):
        decoder = case.new_decoder()
        for message in case.messages:
            decoder.decode(message)
        return decoder

    def _mutation(self, case: hostile.Case) -> str:
        names = hostile.mutations_for(case)
        return self._rng.choices(names, weights=[WEIGHTS[n] for n in names])[0]

    def one(self, name: str) -> None:
        """Spoil one of `name`'s valid messages, decode it, and count what happened."""
        case = self._cases[name]
        if self._since_reset[name] >= self._reset_every:
            self._decoders[name] = self._fresh(case)
            self._since_reset[name] = 0
        self._since_reset[name] += 1
        mutation = self._mutation(case)
        message = hostile.MUTATIONS[mutation](case, self._rng.choice(case.messages), self._chooser)
        outcome, summary = self._decode(self._decoders[name], message)
        self.by_mutation[mutation][outcome] += 1
        self.by_case[name].outcomes[outcome] += 1
        if summary is not None and len(self.failures[outcome]) < self._show:
            self.failures[outcome].append(Failure(name, mutation, message, summary))

    def _decode(self, decoder, message: RawMessage) -> tuple[str, str | None]:
        started = time.perf_counter()
        try:
            with hostile.time_bound():
                events = decoder.decode(message)
        except DecodeError:
            return "decode_error", None
        except (Exception, hostile.DecodeTookTooLong) as err:  # noqa: BLE001 - counting crashes is the point
            return "crash", _summary(err)
        finally:
            self._time(decoder, time.perf_counter() - started)
        for event in events:
            found = hostile.problems(event)
            if found:
                return "unappliable", f"{type(event).__name__} that cannot be applied: {'; '.join(found[:3])}"
        return "ok", None

    def _time(self, decoder, seconds: float) -> None:
        for name, current in self._decoders.items():
            if current is decoder:
                self.by_case[name].decode_seconds += seconds
                return


def _summary(err: BaseException) -> str:
    """The exception and the last frames it passed through, on a few lines."""
    frames = traceback.extract_tb(err.__traceback__)[-4:]
    where = "\n".join(f"      {Path(f.filename).name}:{f.lineno} in {f.name}: {f.line}" for f in frames)
    return f"{type(err).__name__}: {str(err)[:200]}\n{where}"


def _row(label: str, tally: Tally) -> str:
    counts = tally.outcomes
    rate = tally.messages / tally.decode_seconds if tally.decode_seconds else 0.0
    return (
        f"  {label:<26} {tally.messages:>9,} {counts['ok']:>9,} {counts['decode_error']:>12,} {counts['crash']:>7,}"
        f" {counts['unappliable']:>11,} {rate:>11,.0f}"
    )


def _report(fuzzer: Fuzzer, wall_seconds: float) -> None:
    header = f"  {'protocol':<26} {'messages':>9} {'decoded':>9} {'DecodeError':>12} {'crashes':>7} {'unappliable':>11} {'messages/s':>11}"
    print(header)
    total = Tally()
    for name, tally in fuzzer.by_case.items():
        print(_row(name, tally))
        total.outcomes.update(tally.outcomes)
        total.decode_seconds += tally.decode_seconds
    print(_row("total", total))
    print(
        f"  messages/s: decoding alone (as above); {total.messages / wall_seconds:,.0f} including building the "
        f"hostile messages ({wall_seconds:.1f} s wall)"
    )
    print("  by mutation (decoded / DecodeError / crashes / unappliable):")
    for mutation, counts in fuzzer.by_mutation.items():
        if counts:
            print(f"    {mutation:<18} " + " / ".join(f"{counts[o]:,}" for o in OUTCOMES))
    for outcome, failures in fuzzer.failures.items():
        for failure in failures:
            print(
                f"  first {outcome}: {failure.case}, {failure.mutation}, key {_short(failure.message.key)}, "
                f"value {_short(failure.message.value)}"
            )
            print(f"    {failure.summary}")


def _short(data: bytes | None) -> str:
    return "None" if data is None else f"{len(data)} bytes {data[:80]!r}"


def run(args: argparse.Namespace) -> bool:
    hostile.OVERSIZED_BYTES = args.fuzz_oversized_bytes
    # The decoders log what they skip or park (a DDL without a table, a row waiting for its schema):
    # for hostile input that is thousands of expected lines; the counts below say what happened.
    quiet = logging.getLogger("ticdc_delta.schema_cache")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    registry = FakeSchemaRegistry()
    registry.start()
    try:
        with tempfile.TemporaryDirectory(prefix="ticdc-fuzz-") as workdir:
            cases = hostile.build_cases(Path(workdir), registry)
            fuzzer = Fuzzer(cases, random.Random(args.seed), args.fuzz_reset_every, args.fuzz_show_crashes)
            names = list(cases)
            print(f"{args.fuzz_messages:,} hostile messages over {len(names)} decoder configurations", flush=True)
            started = time.perf_counter()
            step = max(1, args.fuzz_messages // 10)
            for n in range(args.fuzz_messages):
                fuzzer.one(names[n % len(names)])
                if (n + 1) % step == 0:
                    print(f"  ... {n + 1:,} messages, {time.perf_counter() - started:.0f} s", flush=True)
            _report(fuzzer, time.perf_counter() - started)
    finally:
        registry.stop()
        quiet.setLevel(level)
    failed = sum(t.outcomes["crash"] + t.outcomes["unappliable"] for t in fuzzer.by_case.values())
    print(f"fuzz: {'FAILED' if failed else 'ok'} ({failed} crashes or unappliable events)", flush=True)
    return failed == 0
