"""Real places to run an agent elsewhere, started by the tests themselves, one of each per test
session (per xdist worker): :func:`podman_box` (a rootful or rootless podman container),
:func:`docker_box` (the same container, reached by the real ``docker`` client through podman's
Docker-API service), :func:`slurm_cluster` (a single-node Slurm on 127.0.0.1). ``tests/conftest.py``
loads this module as a pytest plugin: any test names them as fixtures.

Each is skipped with one line where its programs are missing or it does not start; each is
stopped and removed after the session, whatever happened.

The container runs the image ``escouade-nb-test:bookworm`` (``scripts/ci-podman.sh`` builds it
once per machine: Debian's minbase root file system with ``python3``, ``podman import``-ed; no
registry), with no network (``--network none``: whatever the agent needs of the kernel travels
over the launcher's pipe), this process's pytest scratch folder and ``tests/fixtures`` bind-mounted
at the same paths (the scripted agent and its scenario are where the host has them; the
scripted agent needs only Python's standard library, the image's own ``python3``).

The Slurm cluster is Debian's ``slurm-wlm`` and ``munge``: ``munged`` with its own key and socket,
``slurmctld`` and ``slurmd`` from a generated ``slurm.conf`` (``proctrack/linuxproc``,
``task/none``: no cgroups), all in a temporary folder; ``SLURM_CONF`` is set for the session so
``srun`` (and the agent's launcher) find it. Its one partition, ``debug``, is up (any other name is
refused at once: an allocation refused).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

IMAGE = os.environ.get("ESCOUADE_TEST_IMAGE", "escouade-nb-test:bookworm")
SANDBOX_IMAGE = os.environ.get("ESCOUADE_TEST_SANDBOX_IMAGE", "escouade-nb-test:bookworm-bwrap")
"""The same root file system with ``bubblewrap`` (``--sandbox --via``: bwrap inside the container)."""
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PODMAN, DOCKER = shutil.which("podman"), shutil.which("docker")
SLURM = {name: shutil.which(name) or next((p for p in (f"/usr/sbin/{name}",) if os.path.exists(p)), None)
         for name in ("munged", "slurmctld", "slurmd", "srun", "squeue", "sinfo", "scancel")}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _hard(limit: int) -> int:
    hard = resource.getrlimit(limit)[1]
    return hard if hard != resource.RLIM_INFINITY else 1 << 20


def _wait(check, timeout: float, what: str, log: Path | None = None) -> None:
    """Poll ``check()`` until true (at most ``timeout`` s): a daemon's readiness, which tells no event."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-400:] if log is not None and log.exists() else ""
            pytest.skip(f"{what} did not come up within {timeout:g} s {tail}".strip())
        time.sleep(0.2)


# -- podman --------------------------------------------------------------------------------------

@dataclass
class Box:
    """A running container: its name, the launcher that reaches it (``podman exec -i NAME``),
    and ``ps()``: the command lines of the processes inside it."""

    name: str
    launcher: list[str]
    env: dict[str, str]

    def exec(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([PODMAN or "podman", "exec", self.name, *argv], capture_output=True, text=True,
                              timeout=timeout)

    def ps(self) -> list[str]:
        """The command lines of every process in the container (``ps -eo args``), but ``ps`` itself."""
        out = self.exec("ps", "-eo", "args=").stdout
        return [line for line in out.splitlines() if line.strip() and not line.startswith("ps ")]


@contextlib.contextmanager
def podman_container(scratch: Path, image: str = IMAGE, options: tuple[str, ...] = (),
                     read_only: dict[Path, Path] | None = None, network: str = "none") -> Iterator[Box]:
    """Run a container of ``image`` (default :data:`IMAGE`; ``sleep infinity``) with ``scratch`` and
    ``tests/fixtures`` mounted at their own paths, ``options`` given to ``podman run``; yield its
    :class:`Box`; removed at the end. ``pytest.skip`` (one line) without podman or the image, or when
    it does not start.

    Opt-in (the released agents' container, ``tests/agents/conftest.py``): ``read_only`` maps more
    host paths to where they are mounted read-only inside; ``network`` is podman's ``--network``
    (``none`` unless told)."""
    if PODMAN is None:
        pytest.skip("no podman here (Debian: apt-get install podman; scripts/ci-podman.sh)")
    if subprocess.run([PODMAN, "image", "exists", image], capture_output=True, timeout=60).returncode != 0:
        pytest.skip(f"no podman image {image} (build it once: bash scripts/ci-podman.sh)")
    name = f"escouade-test-{os.getpid()}-{os.urandom(3).hex()}"
    mounts = [f"{FIXTURES}:{FIXTURES}:ro", *(f"{host}:{inside}:ro" for host, inside in (read_only or {}).items())]
    run = ["run", "-d", "--name", name, "--network", network, *options, "-v", f"{scratch}:{scratch}",
           *(word for mount in mounts for word in ("-v", mount)), image, "sleep", "infinity"]
    started = subprocess.run([PODMAN, *run], capture_output=True, text=True, timeout=120)
    if started.returncode != 0 and shutil.which("runc"):
        # a machine with cgroups v1 + v2 both mounted ("hybrid", which crun refuses) and without
        # CAP_SYS_RESOURCE (podman's default rlimits cannot be raised): runc, cgroupfs, our own limits
        subprocess.run([PODMAN, "rm", "-f", name], capture_output=True, timeout=60)
        limits = [f"--ulimit={n}={v}:{v}" for n, v in (("nofile", min(_hard(resource.RLIMIT_NOFILE), 65536)),
                                                        ("nproc", min(_hard(resource.RLIMIT_NPROC), 4096)))]
        started = subprocess.run([PODMAN, "--runtime", "runc", "--cgroup-manager", "cgroupfs", *run[:1], *limits,
                                  *run[1:]], capture_output=True, text=True, timeout=120)
    if started.returncode != 0:
        subprocess.run([PODMAN, "rm", "-f", name], capture_output=True, timeout=60)
        pytest.skip(f"podman could not start a container: {started.stderr.strip()[-300:]}")
    try:
        yield Box(name=name, launcher=[PODMAN, "exec", "-i", name], env={})
    finally:
        subprocess.run([PODMAN, "rm", "-f", "-t", "0", name], capture_output=True, timeout=120)


@contextlib.contextmanager
def docker_service(box: Box, folder: Path) -> Iterator[Box]:
    """The real ``docker`` client reaching ``box`` through podman's Docker-API service
    (``podman system service`` on a unix socket in ``folder``; ``DOCKER_HOST`` names it): yields a
    :class:`Box` whose launcher is ``docker exec -i NAME`` and whose ``env`` holds ``DOCKER_HOST``.
    ``pytest.skip`` without the docker client or when the service does not answer."""
    if DOCKER is None or PODMAN is None:
        pytest.skip("no docker client here (only the client is needed: podman serves its API)")
    sock = folder / "podman.sock"
    log = open(folder / "podman-service.log", "wb")
    service = subprocess.Popen([PODMAN, "system", "service", "--time", "0", f"unix://{sock}"],
                               stdout=log, stderr=log, start_new_session=True)
    env = {"DOCKER_HOST": f"unix://{sock}"}
    try:
        def answers() -> bool:
            if service.poll() is not None:
                pytest.skip(f"podman system service ended: {(folder / 'podman-service.log').read_text()[-300:]}")
            return sock.exists() and subprocess.run(
                [DOCKER, "version"], env={**os.environ, **env}, capture_output=True, timeout=30).returncode == 0
        _wait(answers, 60, "podman's Docker API service", folder / "podman-service.log")
        yield Box(name=box.name, launcher=[DOCKER, "exec", "-i", box.name], env=env)
    finally:
        os.killpg(service.pid, signal.SIGTERM)
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(service.pid, signal.SIGKILL)
            service.wait()
        log.close()


# -- Slurm -----------------------------------------------------------------------------------------

@dataclass
class Cluster:
    """A running single-node Slurm: its ``slurm.conf`` (``SLURM_CONF``), the launcher
    (``srun -N1 --unbuffered``) and ``jobs()``: the job ids ``squeue`` lists."""

    conf: Path
    launcher: list[str]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def jobs(self) -> list[str]:
        out = subprocess.run([SLURM["squeue"] or "squeue", "-h", "-o", "%i %T"], env={**os.environ, **self.env},
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return [line for line in out.stdout.splitlines() if line.strip()]


def _daemon(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def slurm(folder: Path) -> Iterator[Cluster]:
    """Start ``munged``, ``slurmctld`` and ``slurmd`` (node ``escouade0`` on 127.0.0.1, 64 CPUs
    declared so twenty agents fit) with their files in ``folder``; yield the :class:`Cluster`;
    stopped at the end. ``pytest.skip`` (one line) without Slurm/munge or when it does not start."""
    missing = [n for n, p in SLURM.items() if p is None]
    if missing:
        pytest.skip(f"no {', '.join(missing)} here (Debian: apt-get install slurm-wlm munge; scripts/ci-slurm.sh)")
    if os.geteuid() != 0:
        pytest.skip("the test Slurm runs its daemons as this user, and slurmd must be root to start job steps")
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool", "munge"):
        (folder / sub).mkdir(exist_ok=True)
    os.chmod(folder / "munge", 0o700)
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    munge_sock = folder / "munge" / "munge.socket"
    ctld_port, d_port = _free_port(), _free_port()
    conf = folder / "slurm.conf"
    conf.write_text(f"""ClusterName=escouade
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_sock}
CredType=cred/munge
StateSaveLocation={folder / 'state'}
SlurmdSpoolDir={folder / 'spool'}
SlurmctldPidFile={folder / 'slurmctld.pid'}
SlurmdPidFile={folder / 'slurmd.pid'}
SlurmctldLogFile={folder / 'slurmctld.log'}
SlurmdLogFile={folder / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SchedulerType=sched/builtin
KillWait=3
InactiveLimit=0
NodeName=escouade0 NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=64 RealMemory=1 State=UNKNOWN
PartitionName=debug Nodes=escouade0 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:64
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen] = []
    try:
        daemons.append(_daemon([SLURM["munged"], "-F", "--force", f"--socket={munge_sock}", f"--key-file={key}",
                                f"--pid-file={folder / 'munge' / 'munged.pid'}",
                                f"--log-file={folder / 'munge' / 'munged.log'}",
                                f"--seed-file={folder / 'munge' / 'munged.seed'}"], folder / "munged.out"))
        _wait(munge_sock.exists, 30, "munged", folder / "munged.out")
        daemons.append(_daemon([SLURM["slurmctld"], "-D", "-i", "-f", str(conf)], folder / "slurmctld.out"))
        daemons.append(_daemon([SLURM["slurmd"], "-D", "-N", "escouade0", "-f", str(conf)], folder / "slurmd.out"))

        def idle() -> bool:
            if any(d.poll() is not None for d in daemons):
                pytest.skip("a Slurm daemon ended: " + " | ".join(
                    (folder / f).read_text(errors="replace")[-200:] for f in ("slurmctld.log", "slurmd.log")
                    if (folder / f).exists()))
            out = subprocess.run([SLURM["sinfo"], "-h", "-p", "debug", "-o", "%t"], env=env, capture_output=True,
                                 text=True, timeout=30)
            return out.returncode == 0 and out.stdout.strip() in ("idle", "mix", "alloc")
        _wait(idle, 90, "slurmctld and slurmd", folder / "slurmctld.log")
        old = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(conf)
        try:
            yield Cluster(conf=conf, launcher=[SLURM["srun"], "-N1", "--unbuffered"])
        finally:
            if old is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = old
    finally:
        if len(daemons) == 3 and all(d.poll() is None for d in daemons):  # no job outlives the cluster
            subprocess.run([SLURM["scancel"] or "scancel", "--full", "--user", str(os.geteuid())], env=env,
                           capture_output=True, timeout=60)
            with contextlib.suppress(BaseException):
                _wait(lambda: not subprocess.run([SLURM["squeue"], "-h"], env=env, capture_output=True, text=True,
                                                 timeout=30).stdout.strip(), 30, "the jobs' end")
        for daemon in reversed(daemons):
            _stop(daemon)


# -- the session fixtures ----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def podman_box(tmp_path_factory) -> Iterator[Box]:
    """One container for the session (see :func:`podman_container`); launcher ``podman exec -i NAME``."""
    with podman_container(tmp_path_factory.getbasetemp()) as box:
        yield box


@pytest.fixture(scope="session")
def podman_sandbox_box(tmp_path_factory) -> Iterator[Box]:
    """A container of :data:`SANDBOX_IMAGE` (bubblewrap in it) where bwrap can sandbox: ``/proc``
    unmasked (``--security-opt unmask=/proc/*``: a fresh ``/proc`` cannot be mounted over a masked
    one) — user namespaces are allowed by podman's default seccomp profile."""
    with podman_container(tmp_path_factory.getbasetemp(), SANDBOX_IMAGE, ("--security-opt", "unmask=/proc/*")) as box:
        yield box


@pytest.fixture(scope="session")
def podman_masked_box(tmp_path_factory) -> Iterator[Box]:
    """A container of :data:`SANDBOX_IMAGE` as podman makes it by default (``/proc`` masked): bwrap is
    there but cannot mount a fresh ``/proc``."""
    with podman_container(tmp_path_factory.getbasetemp(), SANDBOX_IMAGE) as box:
        yield box


@pytest.fixture(scope="session")
def docker_box(podman_box, tmp_path_factory) -> Iterator[Box]:
    """The session's container through the real ``docker`` client (see :func:`docker_service`)."""
    with docker_service(podman_box, tmp_path_factory.mktemp("docker-api")) as box:
        yield box


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> Iterator[Cluster]:
    """One single-node Slurm for the session (see :func:`slurm`); launcher ``srun -N1 --unbuffered``."""
    with slurm(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster
