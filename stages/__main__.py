"""`python -m stages <command>`: the same as `bert <command>` (used under torchrun)."""

from stages.cli import main

if __name__ == "__main__":
    main()
