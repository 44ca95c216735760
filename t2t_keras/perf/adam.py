"""Adam's per-variable update as TensorFlow's fused ApplyAdam kernel.

Keras' Adam update is a dozen element-wise ops per variable, each allocating a
temporary the size of the variable (the 32k x 512 embedding included); the
fused kernel updates m, v and the variable in place in one pass. It is the
kernel T2T's `tf.train.AdamOptimizer` ran, with the same formula as Keras':
m += (g - m)(1 - β1), v += (g² - v)(1 - β2),
w -= lr·sqrt(1 - β2^t)/(1 - β1^t)·m / (sqrt(v) + ε).

Plain (`T2T_KERAS_PLAIN_OPS=1`), other backends, AMSGrad and sparse gradients:
Keras' own update.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from t2t_keras import perf


def fused_adam_update(optimizer: keras.optimizers.Adam, gradient, variable,
                      learning_rate, step) -> bool:
  """Applies `optimizer`'s Adam step to `variable` with one fused kernel.

  Args:
    optimizer: a built Keras Adam (its momentums and velocities hold the slots).
    gradient: dense, the variable's shape.
    variable: a Keras variable backed by a TensorFlow resource.
    learning_rate: scalar.
    step: Adam's t (1 for its first update), the exponent of the bias correction.
  Returns:
    True if applied; False where Keras' own update must run instead.
  """
  if (perf.plain_ops() or keras.backend.backend() != "tensorflow" or optimizer.amsgrad
      or isinstance(gradient, tf.IndexedSlices) or not hasattr(variable, "handle")):
    return False
  dtype = variable.dtype
  index = optimizer._get_variable_index(variable)  # pylint: disable=protected-access
  step = tf.cast(step, dtype)
  beta_1 = tf.cast(optimizer.beta_1, dtype)
  beta_2 = tf.cast(optimizer.beta_2, dtype)
  tf.raw_ops.ResourceApplyAdam(
      var=variable.handle, m=optimizer._momentums[index].handle,  # pylint: disable=protected-access
      v=optimizer._velocities[index].handle,  # pylint: disable=protected-access
      beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
      lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
      epsilon=tf.cast(optimizer.epsilon, dtype), grad=tf.cast(gradient, dtype),
      use_locking=False)
  return True
