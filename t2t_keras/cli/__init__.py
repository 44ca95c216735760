"""The command-line programs; the only modules that read absl flags.

Importing this package (which every command does first) keeps TensorFlow's C++
start-up lines out of the output unless the user sets TF_CPP_MIN_LOG_LEVEL or
passes --verbosity: see quiet_logs.
"""

from t2t_keras.cli import quiet_logs as _quiet_logs

_quiet_logs.install()
