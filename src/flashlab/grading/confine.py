"""Kernel-enforced limits on the grading child, set before the learner's module is loaded.

Everything else that watches the learner's code (the patched library functions, the torch
dispatch mode, the launch tracker) lives in the learner's interpreter and can be undone from
there. What this module sets up cannot: the kernel keeps it for the rest of the process and its
children, whatever Python code runs afterwards.

- :func:`confine_files` (Linux Landlock, kernel 5.13+): the child may create, change or delete
  files only under its own home folder (and write to /dev/null and GPU device nodes); it may not
  read the files under ``hidden`` (flashlab's package, ``solutions/``, the instructor's pack:
  the answer key on the grading machine, which a student release leaves out); it may not open
  TCP connections; on kernels with Landlock ABI 6 (6.12+) it may not signal processes outside
  itself (the grader, other students' children). It reads and lists only where Python, its
  libraries and the system live, and its own folder (:func:`readable_roots`): not another copy of
  the course, nor a classmate's folder beside the one graded, nor the names of the files in another
  grading child's home (a channel between two children graded at once). Closes: bytecode or ``.pth`` files planted for
  the grader's next run, rewritten solutions or classmates' submissions, ``/proc/self/clear_refs``
  (which would reset the peak memory the grader measures), killing or stopping the grader,
  loading the library or the solutions from the grader's disk or from any other copy of them.
- :func:`forbid_processes` (Linux seccomp, x86-64 and arm64): the child may start threads but no
  process (fork, vfork, clone without CLONE_THREAD fail with EPERM), and may open no socket at all
  (the network, UDP included, which Landlock does not cover; a Unix socket, through which another
  grading child, of this run or a concurrent one, would compute the answers) nor an io_uring. Closes:
  work moved to a forked process, where the grader's memory and CPU measurements do not see it,
  fork bombs, and a remote oracle that computes the answers. It also refuses the ways to hold
  memory that the grader's measurements from outside do not see: shared mappings (``mmap`` with
  MAP_SHARED: a memfd or file written through a mapping whose pages are then dropped with
  ``madvise(MADV_DONTNEED)`` keeps its data in the file; also ``torch.from_file(shared=True)`` and
  System V ``shmat``), data moved into a memfd or file without a ``write()`` the grader counts
  (``splice``, ``tee``, ``vmsplice``, Linux AIO's ``io_submit``), pages pushed to swap (``madvise``
  MADV_COLD and MADV_PAGEOUT, ``process_madvise``), data kept in the kernel (System V message queues
  and ``shmget``, the key rings, a ``socketpair``'s buffers), and ``prctl(PR_SET_DUMPABLE)``, which makes
  the child's ``/proc/<pid>/smaps`` and ``io`` unreadable. Not used for Triton on a GPU, whose compiler runs
  as a process and whose driver maps device memory shared.

Each returns whether it took effect; elsewhere (macOS, old kernels) grading still runs, with the
weaker guarantees docs/ARCHITECTURE.md states.
"""
from __future__ import annotations

import ctypes
import glob
import os
import platform
import struct

# Landlock (include/uapi/linux/landlock.h); the syscall numbers are the same on every architecture
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_VERSION, _RULE_PATH_BENEATH = 1, 1
_WRITE_FILE, _READ_FILE, _READ_DIR, _TRUNCATE = 1 << 1, 1 << 2, 1 << 3, 1 << 14
_MAKE_AND_REMOVE = sum(1 << bit for bit in range(4, 13))  # REMOVE_DIR .. MAKE_SYM
_REFER = 1 << 13
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

# seccomp: (audit arch, seccomp syscall, clone, clone3, socket, syscalls refused outright: fork, vfork,
# io_uring_setup, shmat, process_madvise; the writes /proc/<pid>/io's wchar does not count: splice, tee,
# vmsplice, io_setup, io_submit; memory in the kernel that outlives the process or escapes its measurements:
# System V message queues (msgget, msgsnd, msgrcv, msgctl), shmget, the key rings (add_key, request_key,
# keyctl); and socketpair, whose buffers hold data unseen)
_ARCHES = {"x86_64": (0xC000003E, 317, 56, 435, 41, (57, 58, 425, 30, 440, 275, 276, 278, 206, 209,
                                                     68, 69, 70, 71, 29, 248, 249, 250, 53)),
           "aarch64": (0xC00000B7, 277, 220, 435, 198, (425, 196, 440, 76, 77, 75, 0, 2,
                                                        186, 189, 188, 187, 194, 217, 218, 219, 199))}
# syscalls refused for some arguments only: mmap (MAP_SHARED), madvise (MADV_COLD, MADV_PAGEOUT), prctl
# (PR_SET_DUMPABLE)
_MMAP = {"x86_64": 9, "aarch64": 222}
_MADVISE = {"x86_64": 28, "aarch64": 233}
_PRCTL = {"x86_64": 157, "aarch64": 167}
_MAP_SHARED, _MADV_COLD, _MADV_PAGEOUT, _PR_SET_DUMPABLE = 0x01, 20, 21, 4
_CLONE_THREAD = 0x00010000


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where there is none."""
    if platform.system() != "Linux":
        return 0
    try:
        version = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


# where Python, its libraries and the system's live: what a grading child reads besides its own folder
SYSTEM_ROOTS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/opt",
                "/run", "/nix", "/gnu", "/snap")


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def _everything_but(hidden, roots=("/",)) -> list[str]:
    """Paths whose trees together hold every file beneath ``roots`` but those under ``hidden``: a root
    with no hidden path beneath it whole, and for one with, the other entries of each folder on the way
    from it down to a hidden path."""
    hidden = {os.path.realpath(h) for h in hidden if os.path.exists(h)}
    roots = {os.path.realpath(r) for r in roots if os.path.exists(r)}
    on_the_way = {os.path.dirname(h) for h in hidden}
    for h in list(on_the_way):
        while h != os.path.dirname(h):
            h = os.path.dirname(h)
            on_the_way.add(h)
    def reaches_hidden(path: str) -> bool:  # a hidden path, below one, or above one (a symlink may lead there)
        return path in on_the_way or any(_under(path, h) for h in hidden)

    keep = set()
    for root in roots:
        if any(_under(root, h) for h in hidden):
            continue
        if root not in on_the_way:
            keep.add(root)
            continue
        for folder in (f for f in on_the_way if _under(f, root)):
            try:
                entries = os.listdir(folder)
            except OSError:
                continue
            for entry in entries:
                path = os.path.join(folder, entry)
                if not reaches_hidden(path) and not reaches_hidden(os.path.realpath(path)):
                    keep.add(os.path.realpath(path))
    return sorted(keep)


def readable_roots(extra=()) -> list[str]:
    """What a grading child needs to read: ``SYSTEM_ROOTS``, Python's prefixes and import path, the
    library folders (``LD_LIBRARY_PATH``, and those of every file the process has mapped: shared
    libraries loaded from elsewhere), and ``extra`` (the learner's own folder). Not the rest of the
    machine: another copy of the course, other students' work, the user's home. Call before any learner
    code runs (the process's state is trusted here)."""
    import sys

    roots = list(SYSTEM_ROOTS) + [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    roots += [p for p in sys.path if p and os.path.isabs(p)]
    roots += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and os.path.isabs(p)]
    try:
        with open("/proc/self/maps") as maps:
            mapped = {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}
    except OSError:
        mapped = set()
    roots += [os.path.dirname(p) for p in mapped if p.startswith("/") and os.path.isfile(p)]
    roots += [p for p in extra if p]
    return sorted(set(roots))


def confine_files(home: str, hidden=(), readable=("/",)) -> bool:
    """Allow file changes only beneath ``home``, reading only beneath ``home`` and ``readable`` and
    never under ``hidden`` (see the module docstring); True when in force."""
    abi = landlock_abi()
    if abi < 1:
        return False
    libc = _libc()
    handled = (_WRITE_FILE | _READ_FILE | _READ_DIR | _MAKE_AND_REMOVE | (_REFER if abi >= 2 else 0)
               | (_TRUNCATE if abi >= 3 else 0))
    file_rights = _WRITE_FILE | _READ_FILE | (_TRUNCATE if abi >= 3 else 0)
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("<QQQ", handled, net, scoped)[: 24 if abi >= 6 else 16 if abi >= 4 else 8]
    ruleset = libc.syscall(_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    try:
        devices = ["/dev/null", *glob.glob("/dev/nvidia*"), "/dev/kfd", *glob.glob("/dev/dri/*")]
        rules = ([(home, handled)] + [(path, file_rights) for path in devices]
                 + [(path, _READ_FILE | (_READ_DIR if os.path.isdir(path) else 0))
                    for path in _everything_but(hidden, readable)])
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = struct.pack("<Qi", rights, fd)
                if libc.syscall(_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), rule, ctypes.c_uint32(0)) < 0 \
                        and path == home:
                    return False
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) == 0
    finally:
        os.close(ruleset)


def available() -> bool:
    """Whether this machine can confine a child's writes (Landlock) and its processes (seccomp)."""
    return landlock_abi() >= 1 and platform.machine() in _ARCHES


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def forbid_processes() -> bool:
    """Let threads be started but no process, and refuse memory the grader cannot measure (shared mappings,
    pages sent to swap, an undumpable process), in this process and every thread of it; True when in force."""
    arch = _ARCHES.get(platform.machine()) if platform.system() == "Linux" else None
    if arch is None:
        return False
    audit_arch, seccomp_nr, clone, clone3, socket, refused = arch
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    prog = [_bpf(ld, 4),  # seccomp_data.arch
            _bpf(jeq, audit_arch, 1, 0), _bpf(ret, eperm),  # a foreign ABI (i386 int 0x80): nothing
            _bpf(ld, 0),  # seccomp_data.nr
            _bpf(jge, 0x40000000, 0, 1), _bpf(ret, eperm)]  # x32 syscall numbers
    for nr in refused:
        prog += [_bpf(jeq, nr, 0, 1), _bpf(ret, eperm)]
    machine = platform.machine()
    arg = lambda i: 16 + 8 * i  # noqa: E731  seccomp_data.args[i], its low half
    prog += [_bpf(jeq, _MMAP[machine], 0, 4),
             _bpf(ld, arg(3)),  # mmap's flags: a shared mapping keeps its pages outside the process
             _bpf(jset, _MAP_SHARED, 0, 1), _bpf(ret, eperm), _bpf(ret, allow),
             _bpf(jeq, _MADVISE[machine], 0, 5),
             _bpf(ld, arg(2)),  # madvise's advice: pages sent to swap leave the resident size
             _bpf(jeq, _MADV_COLD, 1, 0), _bpf(jeq, _MADV_PAGEOUT, 0, 1), _bpf(ret, eperm), _bpf(ret, allow),
             _bpf(jeq, _PRCTL[machine], 0, 4),
             _bpf(ld, arg(0)),  # prctl's option: a process that is not dumpable hides its /proc records
             _bpf(jeq, _PR_SET_DUMPABLE, 0, 1), _bpf(ret, eperm), _bpf(ret, allow)]
    prog += [_bpf(jeq, socket, 0, 1), _bpf(ret, eperm),  # no socket: not the network, nor a Unix socket to
             # another grading child (a path-named one, which Landlock does not scope, reaches a concurrent run)
             _bpf(jeq, clone3, 0, 1), _bpf(ret, enosys),  # flags out of reach: libc falls back to clone
             _bpf(jeq, clone, 1, 0), _bpf(ret, allow),
             _bpf(ld, 16),  # low half of args[0]: clone's flags
             _bpf(jset, _CLONE_THREAD, 0, 1), _bpf(ret, allow), _bpf(ret, eperm)]
    code = b"".join(prog)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("<HxxxxxxQ", len(prog), ctypes.addressof(buffer))
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    # SECCOMP_SET_MODE_FILTER with SECCOMP_FILTER_FLAG_TSYNC: every thread of the process, now
    return libc.syscall(seccomp_nr, ctypes.c_uint(1), ctypes.c_uint(1), fprog) == 0
