"""How every command in scripts/ ends on a problem with its input or its environment (a bad argument, a missing file,
an extra not installed): one line, `script.py: error: <message>`, and exit status 1. The messages say what to do; a
traceback would bury them. Anything else is a bug and keeps its traceback.

    if __name__ == "__main__":
        run_command(main)
"""

import sys
from pathlib import Path


USER_ERRORS = (ValueError, OSError, ImportError)  # OSError: missing files, folders given as files, full disks


def run_command(main, *more_user_errors: type[BaseException]) -> None:
    """Call `main(sys.argv[1:])`, reporting the user's errors (and `more_user_errors`) as one line."""
    try:
        main(sys.argv[1:])
    except (*USER_ERRORS, *more_user_errors) as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        sys.exit(1)


__all__ = ["USER_ERRORS", "run_command"]
