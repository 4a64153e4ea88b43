"""Reading the Linux /proc files that describe this machine and this process (the benchmark's processor name and
memory, the CPU decoder's choice of matrix-product library)."""


def proc_field(path: str, name: str) -> str | None:
    """The value of the `name: value` line of a /proc file (/proc/self/status, /proc/cpuinfo), or None."""
    try:
        with open(path) as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


__all__ = ["proc_field"]
