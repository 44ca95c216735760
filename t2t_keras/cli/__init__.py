"""The command-line programs; the only modules that read absl flags.

Importing this package (which every command does first) keeps TensorFlow's C++
start-up lines out of the output unless the user sets TF_CPP_MIN_LOG_LEVEL or
passes --verbosity: see quiet_logs. It also turns TensorFlow's oneDNN kernels on
where TensorFlow would leave them off (AVX2-only x86 CPUs), before TensorFlow
loads: see t2t_keras.cpu_setup.
"""

from t2t_keras import cpu_setup as _cpu_setup
from t2t_keras.cli import quiet_logs as _quiet_logs

_cpu_setup.configure_process()
_quiet_logs.install()
