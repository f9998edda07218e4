"""Register-state machine of a broker's persistent BrokerId (DESIGN.md §3.4).

Seed: persistent-broker-id ("Online Process", "Registration status rotation",
"Fault tolerance"). Pure: no files, no network, no clock, no randomness. The
caller feeds what it found on disk and what the controller answered; the
machine returns the one action to perform next.

States and the files that prove them
------------------------------------
======================================  ==========================================
INITIAL                                 neither ``.broker.meta.temp`` nor
                                        ``.broker.meta``
CREATE_TEMP_METADATA_FILE_DONE          temp holds (expected BrokerId, registerCode)
CREATE_METADATA_FILE_DONE               ``.broker.meta`` holds the BrokerId
REGISTERED                              the controller accepted our current address
RUNNING                                 the role (master/slave) is confirmed
======================================  ==========================================

Only the first three survive a crash, and each is read back from disk, so a
restart lands in exactly the state the files prove:

- no files → INITIAL → ``GetNextBrokerId`` (seed: "CreateTempMetaFile
  failure": the controller allocated nothing, start over);
- temp only → CREATE_TEMP_METADATA_FILE_DONE → ``ApplyBrokerId`` with the
  temp's id and registerCode again (seed: "ApplyBrokerId success,
  CreateMetaFileFromTemp fail": the controller accepts a repeat with the
  same registerCode; if it refuses, the id went to someone else and we
  ``DeleteTempAndRestart``);
- meta → CREATE_METADATA_FILE_DONE → ``Register`` (seed: "normal restart").

Order of effects the driver must keep (each is the only way forward):
``WriteTemp`` is durable before ``ApplyBrokerId`` is sent, and ``CommitTemp``
(atomic rename + dir fsync) happens only after the controller accepted the
id. So a BrokerId the controller handed to this broker's registerCode is
either in our temp file (and re-applied after a crash) or in our meta file;
and a meta file only ever names an id the controller recorded with our
registerCode — two brokers can never hold one id, because the controller's
CAS on registerCode admits one code per id.

Controller requests that fail in transit (timeout, no leader) are not inputs
here: every request this machine emits is idempotent, so the driver simply
repeats the current action after a backoff.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RegisterState(StrEnum):
    INITIAL = "INITIAL"
    CREATE_TEMP_METADATA_FILE_DONE = "CREATE_TEMP_METADATA_FILE_DONE"
    CREATE_METADATA_FILE_DONE = "CREATE_METADATA_FILE_DONE"
    REGISTERED = "REGISTERED"
    RUNNING = "RUNNING"


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class FilesFound:
    """What the identity files held at start-up (None: file absent)."""

    temp_broker_id: int | None = None
    temp_register_code: str | None = None
    meta_broker_id: int | None = None
    meta_cluster_name: str | None = None
    meta_broker_name: str | None = None


@dataclass(frozen=True)
class NextBrokerIdAnswered:
    """GetNextBrokerId returned; `fresh_register_code` is a new random code
    the caller generated (randomness stays outside the machine)."""

    next_broker_id: int
    fresh_register_code: str


@dataclass(frozen=True)
class TempWritten:
    pass


@dataclass(frozen=True)
class ApplyAnswered:
    accepted: bool
    next_broker_id: int = 0


@dataclass(frozen=True)
class MetaCommitted:
    pass


@dataclass(frozen=True)
class TempDeleted:
    pass


@dataclass(frozen=True)
class RegisterAnswered:
    """RegisterBroker answer; `need_to_be_registered` is the controller
    saying it has no record of our id (its data was cleaned)."""

    accepted: bool
    need_to_be_registered: bool = False


@dataclass(frozen=True)
class RoleConfirmed:
    pass


Input = (
    NextBrokerIdAnswered
    | TempWritten
    | ApplyAnswered
    | MetaCommitted
    | TempDeleted
    | RegisterAnswered
    | RoleConfirmed
)


# ---------------------------------------------------------------- actions


@dataclass(frozen=True)
class GetNextBrokerId:
    pass


@dataclass(frozen=True)
class WriteTemp:
    broker_id: int
    register_code: str


@dataclass(frozen=True)
class ApplyBrokerId:
    broker_id: int
    register_code: str


@dataclass(frozen=True)
class CommitTemp:
    broker_id: int


@dataclass(frozen=True)
class DeleteTempAndRestart:
    rejected_broker_id: int


@dataclass(frozen=True)
class Register:
    broker_id: int


@dataclass(frozen=True)
class Done:
    broker_id: int


@dataclass(frozen=True)
class Fail:
    """Stop the process: a person must act (the reason says what)."""

    reason: str


Action = (
    GetNextBrokerId
    | WriteTemp
    | ApplyBrokerId
    | CommitTemp
    | DeleteTempAndRestart
    | Register
    | Done
    | Fail
)


class RegisterProtocolError(Exception):
    """The driver fed an input the current state cannot take (a bug here or there)."""


class RegisterMachine:
    """One broker's identity negotiation. `start` once, then `handle` each result."""

    def __init__(self, cluster_name: str, broker_name: str) -> None:
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self.state = RegisterState.INITIAL
        self.broker_id: int | None = None
        self._register_code: str | None = None
        self._pending: Action | None = None

    @property
    def pending_action(self) -> Action | None:
        """The action handed out last and not yet answered (what to retry)."""
        return self._pending

    def start(self, files: FilesFound) -> Action:
        if self._pending is not None:
            raise RegisterProtocolError("start() called twice")
        if files.meta_broker_id is not None:
            # The meta file wins over a leftover temp: commit_temp is an atomic
            # rename, so both can only coexist if someone copied files around;
            # the committed id is the one the controller confirmed.
            if (files.meta_cluster_name, files.meta_broker_name) not in (
                (None, None),
                (self.cluster_name, self.broker_name),
            ):
                return self._emit(
                    Fail(
                        f".broker.meta belongs to {files.meta_cluster_name}/"
                        f"{files.meta_broker_name}, but this broker is configured as "
                        f"{self.cluster_name}/{self.broker_name}: point --data-dir at "
                        "this broker's own store or fix --cluster-name/--broker-name"
                    )
                )
            self.broker_id = files.meta_broker_id
            self.state = RegisterState.CREATE_METADATA_FILE_DONE
            return self._emit(Register(files.meta_broker_id))
        if files.temp_broker_id is not None and files.temp_register_code is not None:
            self.broker_id = files.temp_broker_id
            self._register_code = files.temp_register_code
            self.state = RegisterState.CREATE_TEMP_METADATA_FILE_DONE
            return self._emit(ApplyBrokerId(files.temp_broker_id, files.temp_register_code))
        self.state = RegisterState.INITIAL
        return self._emit(GetNextBrokerId())

    def handle(self, event: Input) -> Action:
        pending = self._pending
        match (pending, event):
            case (GetNextBrokerId(), NextBrokerIdAnswered(next_id, code)):
                if next_id < 1:
                    raise RegisterProtocolError(f"controller answered nextBrokerId {next_id}")
                self.broker_id, self._register_code = next_id, code
                return self._emit(WriteTemp(next_id, code))
            case (WriteTemp(broker_id, code), TempWritten()):
                self.state = RegisterState.CREATE_TEMP_METADATA_FILE_DONE
                return self._emit(ApplyBrokerId(broker_id, code))
            case (ApplyBrokerId(broker_id, _), ApplyAnswered(accepted, _)):
                if accepted:
                    return self._emit(CommitTemp(broker_id))
                # Seed: "the Broker directly deletes the .broker.meta.temp file
                # and goes back to step 2". We ask GetNextBrokerId again rather
                # than trusting the nextBrokerId in the refusal: it is one more
                # read, and the same path as a fresh start.
                return self._emit(DeleteTempAndRestart(broker_id))
            case (DeleteTempAndRestart(), TempDeleted()):
                self.state = RegisterState.INITIAL
                self.broker_id = self._register_code = None
                return self._emit(GetNextBrokerId())
            case (CommitTemp(broker_id), MetaCommitted()):
                self.state = RegisterState.CREATE_METADATA_FILE_DONE
                self._register_code = None
                return self._emit(Register(broker_id))
            case (Register(broker_id), RegisterAnswered(accepted, need_to_be_registered)):
                if accepted:
                    self.state = RegisterState.REGISTERED
                    return self._emit(Done(broker_id))
                if need_to_be_registered:
                    return self._emit(
                        Fail(
                            f"the controller has no record of BrokerId {broker_id} in "
                            f"{self.cluster_name}/{self.broker_name} (its data was cleaned?): "
                            "delete .broker.meta in the store to take a new id, or restore "
                            "the controller's data"
                        )
                    )
                return self._emit(Register(broker_id))
            case (Done(broker_id), RoleConfirmed()):
                self.state = RegisterState.RUNNING
                return self._emit(Done(broker_id))
        raise RegisterProtocolError(
            f"register state {self.state}: input {event!r} does not answer {pending!r}"
        )

    def _emit(self, action: Action) -> Action:
        self._pending = action
        return action
