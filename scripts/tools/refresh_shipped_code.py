"""Refresh the code of every shipped model (results/NAME/model) from the package's modeling/remote_code/, and each
card's line on it (a content hash and the commit that holds that code); with --check, only say what differs (exit 1).

    python scripts/tools/refresh_shipped_code.py            # after committing a change to modeling/remote_code/
    python scripts/tools/refresh_shipped_code.py --check    # what the suite checks (tests/tools/test_shipped_code.py)
"""

import argparse
import sys

from vaswani_tools.shipped_code import problems, refresh, shipped_folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing: list what differs, exit 1 if anything")
    args = parser.parse_args(argv)
    folders = shipped_folders()
    if args.check:
        found = problems(folders)
        print("\n".join(found) or f"{len(folders)} shipped folders hold the package's code.")
        return 1 if found else 0
    changes = refresh(folders)
    print("\n".join(changes) or f"{len(folders)} shipped folders held the package's code already.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
