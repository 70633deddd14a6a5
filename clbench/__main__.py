"""``python -m clbench``: the command line (as under ``torchrun ... -m clbench run``)."""

from clbench._cli.main import main

if __name__ == "__main__":
    main()
