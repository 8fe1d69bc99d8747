"""`python -m bertstages <command>`: the same as `bert <command>` (used under torchrun)."""

from bertstages.cli import main

if __name__ == "__main__":
    main()
