"""The command-line programs; the only modules that read absl flags.

Importing this package changes nothing in the process. Each command runs
through `common_flags.run_cli`, which first, before TensorFlow loads, applies
the process set-up (`t2t_keras.perf.process.configure_process`: oneDNN kernels
where TensorFlow would leave them off) and keeps TensorFlow's C++ start-up lines
out of the output (`quiet_logs.install`).
"""
