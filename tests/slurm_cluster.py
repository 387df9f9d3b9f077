"""A real single-node SLURM cluster on this machine, for the tests of `hydra/launcher=slurm` (and .ci/run):

    python -m tests.slurm_cluster install   # Debian's packages (root; SLURM 22.05 on Debian 12): ~7-70 s
    python -m tests.slurm_cluster start     # munged, mariadbd, slurmdbd, slurmctld, slurmd, in the background
    python -m tests.slurm_cluster status    # exit 0 when it takes jobs and its accounting answers
    python -m tests.slurm_cluster stop      # every daemon it started, then its state folder

No systemd: each daemon runs in the background with its pid kept in the state folder ($CONVTUNE_SLURM_DIR, default
/tmp/convtune-slurm), its log there too. One node, `localhost`, with this machine's CPUs and memory, one partition
`debug`; jobs run as the user who submits them. Accounting (slurmdbd over MariaDB) is part of it because submitit
asks `sacct` for a job's state: without it results arrive but states stay UNKNOWN. The configuration is written to
/etc/slurm/ and /etc/munge/ (where the clients, sbatch, sacct and scancel, look for it), so the commands need root.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("CONVTUNE_SLURM_DIR", "/tmp/convtune-slurm"))
PACKAGES = ("munge", "mariadb-server", "slurmctld", "slurmd", "slurm-client", "slurmdbd")
DAEMONS = ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged")  # in the order they stop
MUNGE_SOCKET = Path("/run/munge")  # munge's default socket folder: slurmctld reaches slurmdbd through it
DB_SOCKET = Path("/run/mysqld/mysqld.sock")  # where slurmdbd's MariaDB client looks for the server
START_S = 60  # each step of the start waits at most this long
NODE_CPUS = 8  # task slots of the node at least
# MariaDB sized for a few hundred accounting rows: its default 96 MB redo log took seconds to write out
SMALL_DB = ("--innodb-log-file-size=8M", "--innodb-buffer-pool-size=16M")


def say(text: str) -> None:
    print(f"slurm_cluster: {text}", flush=True)


def installed() -> bool:
    return all(shutil.which(c) for c in ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "sbatch", "sacct"))


def install() -> None:
    """Debian's packages, without their recommends; their scripts do not start services (policy-rc.d refuses)."""
    if installed():
        say("installed already")
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    say("installed " + " ".join(PACKAGES))


def _pid(name: str) -> int | None:
    try:
        pid = int((STATE / f"{name}.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def _spawn(name: str, cmd: list[str]) -> None:
    """A daemon in the foreground of a process of its own session, its output in <state>/<name>.log."""
    log = open(STATE / f"{name}.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    (STATE / f"{name}.pid").write_text(str(proc.pid))


def _wait(what: str, ready, name: str) -> None:
    deadline = time.monotonic() + START_S
    while not ready():
        if _pid(name) is None:
            raise SystemExit(f"slurm_cluster: {name} ended while starting ({what}); its log: {STATE / (name + '.log')}")
        if time.monotonic() > deadline:
            raise SystemExit(f"slurm_cluster: {what} not ready within {START_S} s; see {STATE / (name + '.log')}")
        time.sleep(0.2)


def _ok(*cmd: str, timeout: float = 10) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _node() -> tuple[int, int]:
    """This machine's CPUs and memory (MB) as slurmd counts them (`slurmd -C`)."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    return int(fields["CPUs"]), int(fields["RealMemory"])


def _configure() -> None:
    cpus, memory = _node()
    slurm = Path("/etc/slurm")
    slurm.mkdir(parents=True, exist_ok=True)
    (slurm / "slurm.conf").write_text(f"""# written by tests/slurm_cluster.py: one node, this machine
ClusterName=convtune
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
ReturnToService=2
KillWait=2
MinJobAge=300
StateSaveLocation={STATE}/ctld
SlurmdSpoolDir={STATE}/spool
SlurmctldPidFile={STATE}/slurmctld.daemon.pid
SlurmdPidFile={STATE}/slurmd.daemon.pid
SlurmctldLogFile={STATE}/slurmctld.daemon.log
SlurmdLogFile={STATE}/slurmd.daemon.log
# more CPUs than the machine has: the tests' tasks mostly wait at a pause point, and several sweeps share the node
SlurmdParameters=config_overrides
NodeName=localhost CPUs={max(cpus, NODE_CPUS)} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
""")
    dbd = slurm / "slurmdbd.conf"
    dbd.write_text(f"""# written by tests/slurm_cluster.py
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=convtune
StorageLoc=slurm_acct_db
LogFile={STATE}/slurmdbd.daemon.log
PidFile={STATE}/slurmdbd.daemon.pid
""")
    dbd.chmod(0o600)  # slurmdbd refuses a configuration others can read


def start() -> None:
    t0 = time.monotonic()
    if not installed():
        raise SystemExit("slurm_cluster: SLURM is not installed (python -m tests.slurm_cluster install)")
    if status(quiet=True):
        say("running already")
        return
    stop(quiet=True)
    for sub in ("ctld", "spool", "db"):
        (STATE / sub).mkdir(parents=True, exist_ok=True)
    _configure()
    # munge, with its default socket (slurmctld's connection to slurmdbd does not take another one)
    if not Path("/etc/munge/munge.key").exists():
        subprocess.run(["mungekey", "--create"], check=True)
    for folder, owner in ((MUNGE_SOCKET, "munge"), (DB_SOCKET.parent, "mysql")):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.chown(folder, owner, owner)
    _spawn("munged", ["runuser", "-u", "munge", "--", "munged", "--foreground"])
    _wait("munge", lambda: _ok("munge", "-n"), "munged")
    # MariaDB in a data folder of its own
    data = STATE / "db"
    shutil.chown(data, "mysql", "mysql")
    if not (data / "mysql").exists():
        subprocess.run(["mariadb-install-db", "--user=mysql", f"--datadir={data}", "--auth-root-authentication-method=socket",
                        "--skip-test-db", *SMALL_DB], check=True, capture_output=True)
    _spawn("mariadbd", ["mariadbd", "--user=mysql", f"--datadir={data}", f"--socket={DB_SOCKET}", "--skip-networking",
                        f"--pid-file={data / 'mariadbd.pid'}", *SMALL_DB])
    _wait("MariaDB", lambda: _ok("mariadb", f"--socket={DB_SOCKET}", "-e", "SELECT 1"), "mariadbd")
    subprocess.run(["mariadb", f"--socket={DB_SOCKET}", "-e",
                    "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'convtune'; "
                    "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"], check=True)
    _spawn("slurmdbd", ["slurmdbd", "-D"])
    _wait("slurmdbd", lambda: _ok("sacctmgr", "-n", "list", "cluster"), "slurmdbd")
    _spawn("slurmctld", ["slurmctld", "-D", "-i"])
    _wait("slurmctld", lambda: _ok("timeout", "5", "scontrol", "ping"), "slurmctld")
    _spawn("slurmd", ["slurmd", "-D", "-N", "localhost"])
    _wait("the node", lambda: status(quiet=True), "slurmd")
    say(f"running: 1 node, partition debug ({time.monotonic() - t0:.1f} s to start); state and logs in {STATE}")


def status(quiet: bool = False) -> bool:
    """Whether the cluster takes jobs: its node is idle (or busy) and its accounting answers (what submitit needs)."""
    try:
        node = subprocess.run(["timeout", "5", "sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True,
                              timeout=10).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        node = []
    ok = bool(node) and node[0].rstrip("*") in ("idle", "mixed", "allocated") and _ok("timeout", "5", "sacct", "-n")
    if not quiet:
        say("running" if ok else f"not running (node: {' '.join(node) or 'no answer'})")
    return ok


def stop(quiet: bool = False) -> None:
    """Every daemon this script started, SIGTERM then SIGKILL after a grace (slurmd may ignore SIGTERM while it
    retries a controller that is gone)."""
    for name in DAEMONS:
        pid = _pid(name)
        if pid is None:
            continue
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _pid(name) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        if _pid(name) is not None:
            os.killpg(pid, signal.SIGKILL)
        (STATE / f"{name}.pid").unlink(missing_ok=True)
    if STATE.exists():
        shutil.rmtree(STATE, ignore_errors=True)
    if not quiet:
        say("stopped")


if __name__ == "__main__":
    verbs = {"install": install, "start": start, "stop": stop, "status": lambda: sys.exit(0 if status() else 1)}
    if len(sys.argv) != 2 or sys.argv[1] not in verbs:
        sys.exit(f"usage: python -m tests.slurm_cluster {{{'|'.join(verbs)}}}")
    verbs[sys.argv[1]]()
