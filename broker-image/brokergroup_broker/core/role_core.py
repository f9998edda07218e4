"""The broker's role and epoch core (DESIGN.md §3.4, §3.6): the one owner of the
RoleState, the register state and whether writes are taken. Pure: no I/O, no
clock. Role transitions (`role_transitions`) ask it what the controller's answer
means and tell it what they carried out; the produce path asks it whether a
request may be served, and gets the refusal a client can act on."""

from __future__ import annotations

from brokergroup_broker.core import register_state as rs
from brokergroup_broker.core import role as roles
from brokergroup_broker.protocol.messages import BrokerError, ResponseCode


class RoleCore:
    def __init__(self) -> None:
        self.broker_id: int | None = None
        self._state = roles.RoleState()
        self._register_state = rs.RegisterState.INITIAL
        self._accepting_writes = False

    # -- reads ----------------------------------------------------------------------------
    @property
    def state(self) -> roles.RoleState:
        return self._state

    @property
    def role(self) -> roles.Role:
        return self._state.role

    @property
    def master_epoch(self) -> int:
        return self._state.master_epoch

    @property
    def is_master(self) -> bool:
        return self._state.role is roles.Role.MASTER

    @property
    def register_state(self) -> rs.RegisterState:
        return self._register_state

    @property
    def accepting_writes(self) -> bool:
        """Master with its epoch begun and its HA master up (writes are taken)."""
        return self._accepting_writes

    @property
    def fenced(self) -> bool:
        return not self._state.confirmed and not self._state.acting_master

    def confirms_master(self, group: roles.GroupView) -> bool:
        """The answer names this broker master at its epoch (renews the lease)."""
        return self.broker_id is not None and roles.confirms_master(
            self._state, group, self.broker_id
        )

    def decide(
        self, group: roles.GroupView, *, enable_slave_acting_master: bool
    ) -> list[roles.Decision]:
        assert self.broker_id is not None, "decisions need a BrokerId"
        return roles.decide(
            self._state,
            group,
            self.broker_id,
            enable_slave_acting_master=enable_slave_acting_master,
        )

    # -- what was carried out -------------------------------------------------------------
    def on_register_state(self, state: rs.RegisterState) -> None:
        self._register_state = state

    def carried_out(self, decision: roles.Decision) -> None:
        self._state = roles.apply(self._state, decision)
        if isinstance(decision, roles.BecomeMaster):
            self._accepting_writes = True

    def fence(self) -> None:
        """Stay fenced at the current epoch (the next answer retries the transition)."""
        self._state = roles.RoleState(roles.Role.FENCED, self._state.master_epoch)

    def stop_writes(self) -> None:
        self._accepting_writes = False

    def adopt_sync_state_set_epoch(self, epoch: int) -> None:
        """An AlterSyncStateSet this master proposed was accepted at `epoch`."""
        s = self._state
        self._state = roles.RoleState(
            s.role,
            s.master_epoch,
            s.master_broker_id,
            s.master_address,
            max(s.sync_state_set_epoch, epoch),
            s.acting_master,
        )

    def mark_running(self) -> None:
        """REGISTERED → RUNNING once a role is confirmed (register-state machine)."""
        if self._register_state is rs.RegisterState.REGISTERED and self._state.confirmed:
            self._register_state = rs.RegisterState.RUNNING

    # -- the checks requests pass ---------------------------------------------------------
    def require_master_for_write(self) -> None:
        s = self._state
        if s.acting_master:
            raise BrokerError(
                ResponseCode.READ_ONLY,
                f"broker {self.broker_id} is acting master (read-only, RIP-32): the group has "
                "no master; writes resume once the controller elects one",
            )
        if s.role is roles.Role.SLAVE:
            raise BrokerError(
                ResponseCode.NOT_MASTER,
                f"broker {self.broker_id} is a slave at masterEpoch {s.master_epoch}",
                master_address=s.master_address,
            )
        if s.role is not roles.Role.MASTER or not self._accepting_writes:
            raise BrokerError(
                ResponseCode.FENCED,
                f"broker {self.broker_id} has no confirmed role yet "
                f"(role {s.role}, masterEpoch {s.master_epoch})",
            )

    def require_readable(self) -> None:
        s = self._state
        if s.role is roles.Role.FENCED and not s.acting_master:
            raise BrokerError(
                ResponseCode.FENCED,
                f"broker {self.broker_id} is fenced: its role is not confirmed "
                f"(masterEpoch {s.master_epoch})",
            )

    def require_master_reads(self) -> None:
        """Offset queries and consumer offsets: the master or an acting master."""
        self.require_readable()
        s = self._state
        if s.role is roles.Role.SLAVE and not s.acting_master:
            raise BrokerError(
                ResponseCode.NOT_MASTER,
                f"broker {self.broker_id} is a slave; ask the master",
                master_address=s.master_address,
            )
