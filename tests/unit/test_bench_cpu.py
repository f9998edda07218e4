"""The CPU-per-message helpers of bench/rocketmq_client.py (bench/_cpu.py).

How: /proc text captured on the benchmark machine (a process whose comm is "w) (x y", as a
binary of that name gets, and pid 1), parsed to exact numbers; two captures of /proc/stat
turned into busy cores; hand-built samples and process trees for the window arithmetic and
the role labels. Nothing here reads the clock or /proc.
"""

from __future__ import annotations

import pytest

from tests.unit.bench_modules import load_bench_module

cpu = load_bench_module("_cpu")

# Captured from this machine: a copy of python3 named "w) (x y" after 1.5 s of busy work.
STAT_PARENS = (
    "13766 (w) (x y) S 13763 13717 12419 0 -1 4194304 831 0 0 0 56 24 0 0 20 0 1 0 6378648 "
    "14184448 2041 18446744073709551615 4321280 7148169 140720376913312 0 0 0 0 16781312 2 1 0 "
    "0 17 1 0 0 0 0 0 9723336 11027064 536338432 140720376920687 140720376920785 "
    "140720376920785 140720376922091 0\n"
)
# pid 1: large cutime/cstime (fields 16, 17), which must not count.
STAT_INIT = (
    "1 (process_api) S 0 0 0 0 -1 4194560 509932 648193816 0 18647 1015 2037 6073693 650973 "
    "20 0 12 0 6 36835328 2175 18446744073709551615 1 1 0 0 0 0 0 4096 1256 0 0 0 17 0 0 0 0 "
    "0 0 0 0 0 0 0 0 0 0\n"
)
MACHINE_BEFORE = (
    "cpu  6310361 144933 754945 5306446 54061 0 111963 48227 0 0\n"
    "cpu0 3186769 70240 377285 2624453 30930 0 50485 24414 0 0\n"
    "cpu1 3123592 74692 377659 2681993 23130 0 61478 23812 0 0\n"
    "intr 242388491 0 0 0 0 0 0\n"
    "ctxt 555166178\n"
    "btime 1795690208\n"
)
MACHINE_AFTER = (
    "cpu  6312204 144933 755140 5306750 54063 0 111965 48231 0 0\n"
    "cpu0 3187533 70240 377387 2624756 30931 0 50486 24418 0 0\n"
    "cpu1 3124670 74692 377753 2681993 23131 0 61479 23813 0 0\n"
    "intr 242388491 0 0 0 0 0 0\n"
    "ctxt 555166178\n"
    "btime 1795690208\n"
)


def test_comm_with_parentheses_and_spaces_ends_at_the_last_paren() -> None:
    stat = cpu.parse_proc_stat(STAT_PARENS)
    assert stat == cpu.ProcStat(
        pid=13766,
        comm="w) (x y",
        ppid=13763,
        cpu_ticks=56 + 24,
        kernel_ticks=24,
        start_ticks=6378648,
    )


def test_own_cpu_only_not_reaped_childrens() -> None:
    stat = cpu.parse_proc_stat(STAT_INIT)
    assert (stat.pid, stat.comm, stat.ppid) == (1, "process_api", 0)
    assert (stat.cpu_ticks, stat.kernel_ticks) == (1015 + 2037, 2037)
    assert stat.start_ticks == 6


@pytest.mark.parametrize(
    "text",
    ["", "13766 w S 1 2 3", "13766 (w) S 1 2 3", "x (w) " + "1 " * 30, "1 (w) S " + "z " * 30],
)
def test_bad_proc_stat_is_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="stat"):
        cpu.parse_proc_stat(text)


def test_machine_ticks() -> None:
    m = cpu.parse_machine_stat(MACHINE_BEFORE)
    assert m == cpu.MachineTicks(
        busy=6310361 + 144933 + 754945 + 111963 + 48227, idle=5306446 + 54061, cpus=2
    )
    with pytest.raises(ValueError, match="/proc/stat"):
        cpu.parse_machine_stat("intr 1 2 3\n")


def _sample(at_s: float, machine: str, **procs: tuple[int, int, int]) -> object:
    # procs: role → (pid, start_ticks, cpu_ticks); a quarter of the CPU is the kernel's
    return cpu.Sample(
        at_s=at_s,
        procs={(p, s): (role.replace("_", "-"), t, t // 4) for role, (p, s, t) in procs.items()},
        machine=cpu.parse_machine_stat(machine),
    )


def test_window_cores_per_role_and_machine() -> None:
    before = _sample(
        100.0, MACHINE_BEFORE, client=(10, 5, 1000), broker_a=(20, 6, 500), controller_1=(30, 7, 40)
    )
    after = _sample(
        110.0, MACHINE_AFTER, client=(10, 5, 1800), broker_a=(20, 6, 1700), controller_1=(30, 7, 90)
    )
    window = cpu.cpu_window(before, after, ticks_per_s=100)
    assert window.wall_s == 10.0
    assert window.cpu_s == {"broker-a": 12.0, "client": 8.0, "controller-1": 0.5}
    assert window.cores() == {"broker-a": 1.2, "client": 0.8, "controller-1": 0.05}
    # kernel ticks 125→425, 250→450, 10→22
    assert window.kernel_s == {"broker-a": 3.0, "client": 2.0, "controller-1": 0.12}
    # busy 1843 + 195 + 2 + 4 = 2044 ticks, idle 304 + 2 = 306 ticks, over 2 cores
    assert window.machine_busy_cores == pytest.approx(2044 / 2350 * 2)

    report = cpu.load_report(window, messages=10000)
    assert report == {
        "cpu": {"broker-a": 1.2, "client": 0.8, "controller-1": 0.05},
        "cpuWindowS": 10.0,
        "client_cpu_ms_per_msg": 0.8,  # 8 s / 10000
        "server_cpu_ms_per_msg": 1.25,  # 12.5 s / 10000
        "client_kernel_cpu_ms_per_msg": 0.2,  # 2 s / 10000
        "server_kernel_cpu_ms_per_msg": 0.312,  # 3.12 s / 10000
        "machine_busy_cores": 1.74,
        "other_busy_cores": -0.31,  # 1.7396 - (1.2 + 0.8 + 0.05): made-up roles, real ticks
    }
    assert cpu.load_report(window, messages=0)["server_cpu_ms_per_msg"] is None


def test_same_pid_new_process_counts_from_zero_and_the_dead_count_nothing() -> None:
    # pid 20 was recycled (new start time): the new process was born in the window.
    before = _sample(0.0, MACHINE_BEFORE, broker_a=(20, 6, 500), broker_b=(21, 6, 300))
    after = _sample(2.0, MACHINE_AFTER, broker_a=(20, 9, 30))
    window = cpu.cpu_window(before, after, ticks_per_s=100)
    assert window.cpu_s == {"broker-a": 0.3}
    with pytest.raises(ValueError, match="forward"):
        cpu.cpu_window(after, before)


def test_roles_by_nearest_named_ancestor() -> None:
    def p(pid: int, ppid: int, comm: str = "x") -> object:
        return cpu.ProcStat(
            pid=pid, comm=comm, ppid=ppid, cpu_ticks=0, kernel_ticks=0, start_ticks=1
        )

    procs = {
        1: p(1, 0),
        50: p(50, 1, "supervise"),
        51: p(51, 50),  # controller
        52: p(52, 50),  # broker wrapper
        53: p(53, 52, "java"),  # the broker's JVM under its wrapper
        54: p(54, 50, "helper"),  # unnamed child of the supervisor
        60: p(60, 1, "java"),  # the client
        70: p(70, 1, "bash"),  # somebody else's
    }
    named = {50: "supervisor", 51: "controller-1", 52: "broker-127.0.1.170", 60: "client"}
    assert cpu.label_tree(procs, named) == {
        50: "supervisor",
        51: "controller-1",
        52: "broker-127.0.1.170",
        53: "broker-127.0.1.170",
        54: "supervisor",
        60: "client",
    }
