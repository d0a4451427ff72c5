"""The grading child process, seen from the parent: start it, feed it one case at a time, watch it.

Each exercise is graded in a child process of its own: a fresh interpreter (``python -m
flashlab.grading.child``) when grading files, an ``os.fork`` when grading function objects from a
notebook (they cannot be re-imported). The child runs :mod:`flashlab.grading.child`; it gets the
inputs of one case at a time and answers with plain data (:mod:`flashlab.grading.wire`). The
reference, the comparison and the verdict stay in this process.

The child
- starts in a session of its own (its process group is killed after each exercise, and every
  process that carries the session's token or was reparented to us from it),
- gets no file descriptor of ours but its two pipes (stdin and stdout are /dev/null, stderr a
  private file),
- runs under RLIMIT_CPU, RLIMIT_FSIZE, and RLIMIT_AS where no GPU driver needs a large address
  space; its resident memory is also watched from here and the child is killed past ``MEMORY_LIMIT``,
- may change files only in its own home folder (also its TMPDIR), and may start no process
  unless it runs Triton on a GPU (:mod:`flashlab.grading.confine`, where the kernel allows),
- drops to the unprivileged uid ``nobody`` when the grader runs as root (after importing the
  grader's modules, before loading the learner's code), so it cannot change the grader's files.

Peak memory of a call is measured from outside: ``/proc/<pid>/clear_refs`` resets the child's
peak resident size (VmHWM) just before the call and ``/proc/<pid>/status`` is read after it. CPU
time of a call comes from ``/proc/<pid>/stat``. Neither is available on macOS: those checks are
then skipped and said so.
"""
from __future__ import annotations

import os
import pwd
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from flashlab.grading import wire

LOAD_LIMIT_S = 180.0  # importing torch + triton on a busy 2-core laptop can take a while
MEMORY_LIMIT = 6 << 30  # bytes of resident memory before the child is killed
CPU_LIMIT_S = 900  # RLIMIT_CPU of one child (seconds of CPU, all its cases together)
ADDRESS_LIMIT = 24 << 30  # RLIMIT_AS where there is no GPU driver (bytes of virtual memory)
FILE_LIMIT = 256 << 20  # RLIMIT_FSIZE: bytes of one file the child writes (its stderr included)
DISK_LIMIT = 1 << 30  # bytes on disk of all files in the child's home, checked every second
TOKEN_VAR = "FLASHLAB_GRADING_SESSION"


def _proc_status(pid: int) -> dict:
    try:
        with open(f"/proc/{pid}/status") as f:
            return {k: v.strip() for k, _, v in (line.partition(":") for line in f)}
    except OSError:
        return {}


def _kib(text: str | None) -> int | None:
    return int(text.split()[0]) * 1024 if text else None


def _cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _folder_bytes(folder: str, cap: int) -> int:
    """Bytes on disk under ``folder``, counting no further than ``cap`` (or 100000 entries)."""
    total, entries = 0, 0
    for root, dirs, files in os.walk(folder):
        for name in files:
            entries += 1
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
            if total > cap or entries > 100_000:
                return cap + 1
    return total


def has_gpu_driver() -> bool:
    """Whether this machine has an NVIDIA or AMD GPU driver (seen from the grading parent)."""
    return Path("/dev/nvidiactl").exists() or Path("/dev/kfd").exists()


def unprivileged_uid() -> int | None:
    """The uid to drop to: ``nobody`` when we run as root (and GPU devices allow it), else None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or os.environ.get("FLASHLAB_GRADER_KEEP_ROOT"):
        return None
    try:
        uid = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None
    for dev in Path("/dev").glob("nvidia*"):
        if dev.is_char_device() and (dev.stat().st_mode & 0o006) != 0o006:
            return None  # the device would be closed to nobody: keep root, rely on the file digests
    import sysconfig

    paths = [sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")] + [str(Path(__file__).parents[2])]
    return uid if all(_open_to_others(Path(p)) for p in paths) else None


def _open_to_others(path: Path) -> bool:
    """Whether a process of another uid can read ``path`` (every folder above it searchable)."""
    try:
        path = path.resolve()
        for folder in [path, *path.parents]:
            if not folder.stat().st_mode & 0o001:
                return False
        return bool(path.stat().st_mode & 0o004)
    except OSError:
        return False


# What a graded file's process inherits from the grader's environment: what Python, the CUDA
# driver, Triton and torch read, and the course's own settings. Nothing else: an instructor grading
# a class may hold tokens or keys in the environment, and a submission's error message comes back
# in the report its author reads.
CHILD_ENV_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "SYSTEMROOT", "VIRTUAL_ENV",
                             "CONDA_PREFIX", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUTF8", "PYTHONPATH"})
CHILD_ENV_PREFIXES = ("LC_", "FLASHLAB_", "TRITON_", "CUDA_", "NVIDIA_", "TORCH_", "PYTORCH_")


def child_environment(environ) -> dict:
    """The variables of ``environ`` a grading child may see (``CHILD_ENV_NAMES`` and
    ``CHILD_ENV_PREFIXES``), without the grader's own ``FLASHLAB_GRADER*`` settings."""
    return {k: v for k, v in environ.items()
            if (k in CHILD_ENV_NAMES or k.startswith(CHILD_ENV_PREFIXES)) and not k.startswith("FLASHLAB_GRADER")}


class Child:
    """One grading child for one exercise (``functions``: grade function objects in a fork)."""

    def __init__(self, job: dict, functions: dict | None = None):
        self.token = secrets.token_hex(8)
        self.home = tempfile.mkdtemp(prefix="flashlab-grading-")
        uid = job.get("drop_uid")
        if uid is not None:
            os.chown(self.home, uid, -1)
        self.stderr = tempfile.TemporaryFile()
        self.started = time.time()
        self.info: dict = {}
        self.disk_checked = time.monotonic()
        gpu_triton = bool(job.get("triton")) and has_gpu_driver()
        limits = dict(cpu_s=CPU_LIMIT_S, fsize_bytes=FILE_LIMIT, as_bytes=None if gpu_triton else ADDRESS_LIMIT)
        job = dict(job, limits=limits, home=self.home, no_processes=not gpu_triton)  # the GPU compiler is a process
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        with SPAWN_LOCK:  # no cleanup scan sees this child before it is known as ours
            if functions is not None:
                self.pid = self._fork(job, functions, (to_child_r, from_child_w), (to_child_w, from_child_r))
                self.proc = None
            else:
                src = str(Path(__file__).resolve().parents[2])
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "flashlab.grading.child", str(to_child_r), str(from_child_w)],
                    pass_fds=(to_child_r, from_child_w), env=self._env(src), cwd=self.home, start_new_session=True,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr)
                self.pid = self.proc.pid
            ACTIVE.add(self.pid)
        os.close(to_child_r)
        os.close(from_child_w)
        self.fd_out, self.fd_in = to_child_w, from_child_r
        self.job = job if functions is None else None
        # before any learner code: a refusal of /proc/<pid>/clear_refs later is the learner's doing
        self.measurable = self.reset_peak() is not None

    def send_job(self) -> None:
        """Hand a fresh interpreter its job (a fork has it already)."""
        if self.job is not None:
            wire.send(self.fd_out, self.job)

    def _env(self, src: str) -> dict:
        env = child_environment(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        env.update({TOKEN_VAR: self.token, "HOME": self.home, "TMPDIR": self.home,
                    "TRITON_CACHE_DIR": os.path.join(self.home, "triton"),
                    "XDG_CACHE_HOME": self.home, "MPLCONFIGDIR": self.home, "PYTHONDONTWRITEBYTECODE": "1",
                    "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        return env

    def _fork(self, job, functions, keep, close) -> int:
        pid = os.fork()
        if pid:
            return pid
        code = 0
        try:  # the child: a session of its own, no descriptors of the parent but its pipes
            os.setsid()
            os.environ.update({TOKEN_VAR: self.token, "HOME": self.home, "TMPDIR": self.home,
                               "PYTHONDONTWRITEBYTECODE": "1", "TRITON_CACHE_DIR": os.path.join(self.home, "triton")})
            tempfile.tempdir = None  # gettempdir() reads TMPDIR again
            for fd in close:
                os.close(fd)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1):
                os.dup2(null, fd)
            os.dup2(self.stderr.fileno(), 2)
            os.closerange(3, min(keep))
            os.closerange(min(keep) + 1, max(keep))
            os.closerange(max(keep) + 1, 4096)
            os.chdir(self.home)
            from flashlab.grading.child import serve

            serve(keep[0], keep[1], job, functions)
        except BaseException:
            code = 1
        finally:
            os._exit(code)

    def receive(self, timeout: float, max_bytes: int = wire.MAX_MESSAGE) -> tuple[dict, list]:
        """Next message, watching memory; TimeoutError after ``timeout`` s, EOFError if the child died,
        WireError for a message over ``max_bytes``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if self._ready(min(left, 0.25)):
                return wire.recv(self.fd_in, timeout=max(left, 5.0), max_bytes=max_bytes)
            self._watch()

    def _ready(self, wait: float) -> bool:
        import select

        return bool(select.select([self.fd_in], [], [], wait)[0])

    def _watch(self):
        rss = _kib(_proc_status(self.pid).get("VmRSS"))
        limit = int(os.environ.get("FLASHLAB_GRADER_MEMORY_LIMIT", MEMORY_LIMIT))  # the grader's env, not the child's
        if rss is not None and rss > limit:
            self.kill()
            raise MemoryError(f"used more than {limit / 2**30:.1f} GiB of memory")
        if time.monotonic() - self.disk_checked > 1.0:  # its home is the one folder it may write to
            self.disk_checked = time.monotonic()
            disk = int(os.environ.get("FLASHLAB_GRADER_DISK_LIMIT", DISK_LIMIT))
            if _folder_bytes(self.home, disk) > disk:
                self.kill()
                raise MemoryError(f"wrote more than {disk / 2**20:.0f} MiB of files (or 100000 files) in its folder")
        if self.exitcode() is not None:
            raise EOFError("the grading process exited")

    def send(self, header: dict, buffers: list = ()) -> None:
        wire.send(self.fd_out, header, list(buffers))

    def exitcode(self):
        if self.proc is not None:
            return self.proc.poll()
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return getattr(self, "_status", -1)
        if pid == 0:
            return None
        self._status = os.waitstatus_to_exitcode(status)
        return self._status

    def wait_exit(self, seconds: float = 5.0):
        for _ in range(int(seconds / 0.05)):
            code = self.exitcode()
            if code is not None:
                return code
            time.sleep(0.05)
        return None

    # -- measurements from outside
    def reset_peak(self) -> int | None:
        """Reset the child's peak resident size and the referenced bits of its pages; its current
        resident size (bytes), None if unsupported."""
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("1")
        except OSError:
            return None
        return _kib(_proc_status(self.pid).get("VmRSS"))

    def peak(self) -> int | None:
        return _kib(_proc_status(self.pid).get("VmHWM"))

    def referenced(self) -> int | None:
        """Bytes of the child's writable memory read or written since :meth:`reset_peak`: memory it
        held before (a pool touched at import) and used again is in here, not in the peak."""
        total, writable = 0, False
        try:
            with open(f"/proc/{self.pid}/smaps") as f:
                for line in f:
                    if line.startswith("Referenced:"):
                        total += int(line.split()[1]) * 1024 if writable else 0
                    elif "-" in line.split(" ", 1)[0]:  # a mapping's first line: range, permissions, ...
                        writable = line.split()[1][1:2] == "w"
        except (OSError, IndexError, ValueError):
            return None
        return total

    def written(self) -> int | None:
        """Bytes the child has passed to write() and its kin (files, memfds, pipes): /proc/<pid>/io wchar."""
        try:
            with open(f"/proc/{self.pid}/io") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))
        except (OSError, StopIteration, IndexError, ValueError):
            return None

    def cpu(self) -> float | None:
        return _cpu_seconds(self.pid)

    def stderr_tail(self) -> str:
        self.stderr.seek(0, os.SEEK_END)
        self.stderr.seek(max(0, self.stderr.tell() - 800))
        return self.stderr.read().decode(errors="replace").strip()

    def kill(self) -> None:
        """Kill the child, its process group, and anything that carries its token or came from it."""
        for sig_target in (self.pid,):
            try:
                os.killpg(sig_target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        kill_leftovers(self.token, self.started)

    def stop(self) -> None:
        try:
            self.send(dict(op="stop"))
        except OSError:
            pass
        self.kill()
        ACTIVE.discard(self.pid)
        if self.proc is not None:
            try:
                self.proc.wait(10.0)
            except subprocess.TimeoutExpired:
                pass
        else:
            self.wait_exit(5.0)
        for fd in (self.fd_in, self.fd_out):
            try:
                os.close(fd)
            except OSError:
                pass
        self.stderr.close()
        import shutil

        shutil.rmtree(self.home, ignore_errors=True)


ACTIVE: set = set()  # pids of live grading children (two exercises may be graded at once)
SPAWN_LOCK = threading.Lock()


def kill_leftovers(token: str, since: float) -> None:
    """Kill processes that carry ``token`` in their environment, or that were reparented to us
    (we are a child subreaper) after ``since`` and are not a live grading child."""
    with SPAWN_LOCK:
        _kill_leftovers(token, since)


def _kill_leftovers(token: str, since: float) -> None:
    me = os.getpid()
    boot = _boot_time()
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid == me or pid in ACTIVE:
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        mine = f"{TOKEN_VAR}={token}".encode() in environ
        started = boot + int(stat[19]) / tick if boot else 0.0
        orphan = int(stat[1]) == me and started >= since - 1.0 and int(stat[2]) not in ACTIVE
        if mine or orphan:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _boot_time() -> float:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime"):
                return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def become_subreaper() -> None:
    """Orphans of the grading children (a double fork, setsid) are reparented to us, to be killed."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def hide_our_descriptors() -> None:
    """Make /proc/<our pid>/fd unreadable to processes of the same uid (the CLI's stdout is ours)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    except (OSError, AttributeError):
        pass
