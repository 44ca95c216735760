"""The version of t2t-keras: the one place it is set (setup.py reads it from here).

Kept free of imports so that `--version` and setup.py read it without TensorFlow.
"""

__version__ = "0.2.0"
