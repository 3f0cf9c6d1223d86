"""Trust only what the current user owns: the checks pgmem makes before it reads a file or a
folder of its data directory (OpenSSH's ``StrictModes`` is the model).

A path passes when its owner is one of the allowed users (by default the current one) and
neither its group nor others can write to it (its group may, when it is the owner's private
group -- named after the owner, no other member -- as Debian's OpenSSH allows for users whose
umask is 002); a secret (a key, a password, a token) must also
be unreadable by them. The folders above the data directory must each belong to the current
user or to root and be writable by no one else, unless they are sticky (``/tmp``): otherwise
another user could swap the data directory for one of their own. Anything else raises
:class:`~pgmem.errors.UnsafePathError`, which names the path, what was found and the command
that fixes it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection
from pathlib import Path

from pgmem.errors import UnsafePathError

_READABLE_BY_OTHERS = 0o077


def user_name(uid: int) -> str:
    """The name of ``uid`` (its number when it has none)."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def _private_group(found: os.stat_result) -> bool:
    """Whether ``found``'s group is its owner's private group (the owner's name, no other
    member)."""
    try:
        import grp

        group = grp.getgrgid(found.st_gid)
    except (ImportError, KeyError):
        return False
    owner = user_name(found.st_uid)
    return group.gr_name == owner and set(group.gr_mem) <= {owner}


def _writable_by_others(found: os.stat_result) -> bool:
    mode = stat.S_IMODE(found.st_mode)
    if mode & stat.S_IWOTH:
        return True
    return bool(mode & stat.S_IWGRP) and not _private_group(found)


def check(
    path: Path, *, owners: Collection[int] | None = None, secret: bool = False
) -> os.stat_result | None:
    """``path``'s status once it passes the checks; None when it does not exist.

    ``owners``: the uids that may own it (default: the current user's); ``secret``: group and
    others may not read it either.

    Raises:
        UnsafePathError: another user owns it, or group or others can write (or, for a secret,
            read) it.
    """
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafePathError(f"pgmem cannot check {path}: {exc}") from exc
    me = os.geteuid()
    allowed = {me} if owners is None else set(owners)
    mode = stat.S_IMODE(found.st_mode)
    if found.st_uid not in allowed:
        expected = " or ".join(sorted(user_name(uid) for uid in allowed))
        raise UnsafePathError(
            f"{path} belongs to {user_name(found.st_uid)} (uid {found.st_uid}, mode {mode:04o}), "
            f"not to {expected}: pgmem does not use files another user could have planted. "
            f"If it is yours, `chown {expected} {path}`; otherwise remove it, or choose another "
            "PGMEM_HOME"
        )
    if _writable_by_others(found):
        raise UnsafePathError(
            f"{path} is writable by other users (owner {user_name(found.st_uid)}, mode "
            f"{mode:04o}): `chmod go-w {path}`"
        )
    if secret and mode & _READABLE_BY_OTHERS:
        raise UnsafePathError(
            f"{path} holds a secret and is readable by other users (owner "
            f"{user_name(found.st_uid)}, mode {mode:04o}): `chmod 600 {path}`, or delete it "
            "for a new one"
        )
    return found


def check_home(home: Path) -> None:
    """Check the data directory ``home`` (see :func:`check`) and every folder above it: each
    must belong to the current user or root, and be writable by no one else unless sticky.

    Raises:
        UnsafePathError: one of them does not pass.
    """
    check(home)
    me = os.geteuid()
    for parent in home.absolute().parents:
        try:
            found = parent.stat()
        except OSError as exc:
            raise UnsafePathError(f"pgmem cannot check {parent}: {exc}") from exc
        mode = stat.S_IMODE(found.st_mode)
        if found.st_uid not in (me, 0):
            raise UnsafePathError(
                f"{parent}, above pgmem's data directory {home}, belongs to "
                f"{user_name(found.st_uid)} (uid {found.st_uid}, mode {mode:04o}), who could "
                "replace the data directory: choose a PGMEM_HOME in a folder of your own"
            )
        if _writable_by_others(found) and not mode & stat.S_ISVTX:
            raise UnsafePathError(
                f"{parent}, above pgmem's data directory {home}, is writable by other users "
                f"(mode {mode:04o}), who could replace the data directory: `chmod go-w "
                f"{parent}` (or `chmod +t {parent}`), or choose another PGMEM_HOME"
            )
