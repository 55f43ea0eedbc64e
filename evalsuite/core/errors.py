"""Errors that the CLI turns into one line and an exit code instead of a traceback."""


import errno

# What a refused write on a sound input means: no room, or a folder the process may not write.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG})

# A path of the wrong kind for what the command writes there: the user's input, so exit 2, said as such.
PATH_KIND_HINTS = {
    errno.EISDIR: "give a file, not a folder",
    errno.ENOTDIR: "a part of it is a file, not a folder",
    errno.EEXIST: "give a folder, or a path that does not exist yet",
}


class EvalsuiteError(Exception):
    """An error a user can act on; its message is shown as is."""

    exit_code = 1


class ConfigError(EvalsuiteError):
    """Bad input: a config, rules file or argument. Exit code 2."""

    exit_code = 2


class StorageError(EvalsuiteError):
    """The machine refused a write the user did not cause by input: a full disk, a read-only folder.
    Exit code 4; what was recorded before it stays, and `--resume` continues once it is fixed."""

    exit_code = 4


class InternalError(EvalsuiteError):
    """A bug of evalsuite's met while judging: exit 70 (sysexits' EX_SOFTWARE), so that a crash never
    reads as a verdict (the gate's 1 is "failed")."""

    exit_code = 70


class UnsupportedVariant(EvalsuiteError):
    """The engine cannot run this variant on this platform; the variant is skipped."""


class UnknownName(ConfigError):
    """A name that no registry entry has (an engine mode, a task type): the message lists those there are,
    as lm-eval's registry does."""

    def __init__(self, what: str, name: object, available: list[str]):
        super().__init__(f"Unknown {what} {name!r}. Available: {', '.join(available)}")
        self.available = available
