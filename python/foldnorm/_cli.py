"""The ``foldnorm`` command of a pip install: runs the C++ CLI installed inside the package
(``foldnorm/bin/foldnorm``, built by CMake with the extension; pyproject.toml)."""
import os
import sys


def cli_path() -> str:
    """The C++ CLI of this package (it exists in a pip install, not in the build-tree package)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "foldnorm")


def main() -> None:
    exe = cli_path()
    if not os.access(exe, os.X_OK):
        sys.stderr.write("foldnorm: error: this foldnorm package has no CLI (a build-tree package: "
                         "run build/src/foldnorm)\n")
        sys.exit(2)
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
