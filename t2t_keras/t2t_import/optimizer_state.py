"""T2T's optimizer state in our optimizers: its Adam moments and Adafactor's factored ones.

The slots of a T2T checkpoint sit beside their variables (`<variable>/Adam`,
`<variable>/Adam_1`, `<variable>/Adafactor_<n>`); each lands in the slot of the
variable `variable_names` maps that name to, the embedding's row shards joined.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from t2t_keras.t2t_import.variable_names import MODALITY_RE, body_variable_map, modality_roles

_ADAM_SLOT_RE = re.compile(r"^(?:.*?/)?(transformer/.*)/(Adam|Adam_1)$")
# Slots of T2T's other optimizers (Adafactor's factored moments, momentum, ...).
_OTHER_SLOT_RE = re.compile(r"^(?:.*?/)?transformer/.*/(Adafactor|Momentum)(_\d+)?$")
_ADAFACTOR_SLOT_RE = re.compile(r"^(?:.*?/)?(transformer/.*)/Adafactor(?:_(\d+))?$")


def _slot_names(names: Iterable[str]) -> Dict[Tuple[str, str], str]:
  """{(T2T variable name, "Adam" or "Adam_1"): checkpoint name} of the Adam slots.

  T2T's optimize_loss creates them under its "training" scope
  (`training/<variable>/Adam`); any prefix before `transformer/` is accepted.
  """
  out = {}
  for name in names:
    match = _ADAM_SLOT_RE.match(name)
    if match:
      out[(match.group(1), match.group(2))] = name
  return out


def _adam_updates_made(reader, shapes, beta1: float, beta2: float) -> Optional[int]:
  """Updates T2T's Adam made, from its `beta1_power`/`beta2_power`.

  TF1's Adam starts each power at beta and multiplies it by beta after every
  update: power = beta^(t + 1) after t updates. None without the powers, or
  when they underflowed to 0 (beta2 0.98 after ~5,000 updates in float32):
  then any large t gives the same bias correction, 1.
  """
  powers = {}
  for name in shapes:
    for which in ("beta1_power", "beta2_power"):
      if name == which or name.endswith("/" + which):
        powers[which] = float(reader.get_tensor(name))
  if not powers:
    return None
  for which, beta in (("beta2_power", beta2), ("beta1_power", beta1)):
    power = powers.get(which, 0.0)
    if 0.0 < beta < 1.0 and power > 0.0:
      return max(0, int(round(np.log(power) / np.log(beta))) - 1)
  return None


def load_t2t_adam_state(model, optimizer, checkpoint_path: str, updates: int
                        ) -> Dict[str, Any]:
  """Assigns T2T's Adam moments (`Adam`, `Adam_1` slots) to a built Keras Adam.

  The moments of the symbol-modality shards are concatenated like the
  weights. Adam's bias correction continues from T2T's: the beta powers give
  the updates T2T's Adam made.

  Args:
    model: the `Transformer` whose weights `load_t2t_weights` assigned.
    optimizer: a built `optimization.FusedAdam` over `model.trainable_variables`.
    checkpoint_path: the T2T checkpoint.
    updates: the optimizer updates of the imported run (our step).
  Returns:
    {"slots": Adam slot tensors read (0: the checkpoint has no Adam state),
     "adam_step_offset": updates - the updates T2T's Adam made (see
     `FusedAdam`): `updates` when Adam starts fresh, "other_optimizer":
     the slot suffix of another optimizer's state found, or ""}.
  Raises:
    ValueError: the checkpoint has Adam slots for some variables but not all,
      or of the wrong shape.
  """
  reader = tf.train.load_checkpoint(checkpoint_path)
  shapes = reader.get_variable_to_shape_map()
  slots = _slot_names(shapes)
  other = sorted({m.group(1) for m in map(_OTHER_SLOT_RE.search, shapes) if m})
  if not slots:
    return {"slots": 0, "adam_step_offset": updates, "other_optimizer": ",".join(other)}
  targets = _slot_targets(model, shapes)
  missing, assignments = [], []
  for variable, names in targets:
    index = optimizer._get_variable_index(variable)  # pylint: disable=protected-access
    for suffix, slot in (("Adam", optimizer._momentums[index]),  # pylint: disable=protected-access
                         ("Adam_1", optimizer._velocities[index])):  # pylint: disable=protected-access
      keys = [slots.get((name, suffix)) for name in names]
      if None in keys:
        missing += [f"{name}/{suffix}" for name, key in zip(names, keys) if key is None]
        continue
      value = np.concatenate([reader.get_tensor(k) for k in keys], axis=0)
      if list(value.shape) != list(slot.shape):
        missing.append(f"{names[0]}/{suffix} (shape {list(value.shape)}, the variable's "
                       f"{list(slot.shape)})")
        continue
      assignments.append((slot, value))
  if missing:
    raise ValueError(f"T2T checkpoint {checkpoint_path} has Adam slots for some variables "
                     f"but not these: {', '.join(missing)} (a damaged or partial checkpoint; "
                     "pass --reset_optimizer to import the weights with a fresh Adam).")
  for slot, value in assignments:
    slot.assign(value.astype(np.float32))
  made = _adam_updates_made(reader, shapes, optimizer.beta_1, optimizer.beta_2)
  offset = 0 if made is None else max(0, updates - made)
  return {"slots": sum(len(names) * 2 for _, names in targets), "adam_step_offset": offset,
          "other_optimizer": ""}


def _adafactor_kinds(optimizer, variable) -> List[str]:
  """T2T's Adafactor slots of `variable` in creation order (`_create_slots`), which
  TF1 names `<variable>/Adafactor`, `<variable>/Adafactor_1`, ..."""
  return (["m"] if optimizer.beta1 else []) + (
      ["vr", "vc"] if optimizer.is_factored(variable) else ["v"])


def _join_shards(kind: str, values: List[np.ndarray], rows: List[int]) -> np.ndarray:
  """One slot of the whole embedding from its row shards' slots.

  Row-wise slots (m, v, vr) concatenate; vc, a mean over rows, is the
  row-weighted mean of the shards' (the same recurrence over all rows).
  """
  if kind != "vc" or len(values) == 1:
    return np.concatenate(values, axis=0)
  return sum(v * r for v, r in zip(values, rows)) / float(sum(rows))


def load_t2t_adafactor_state(model, optimizer, checkpoint_path: str, updates: int
                             ) -> Dict[str, Any]:
  """Assigns T2T's Adafactor slots (`m`, `vr`, `vc`, `v`) to a built `T2TAdafactor`.

  T2T's decay rate reads the global step, which the import keeps: with the
  slots, the step offset is 0. T2T treated each symbol-modality shard as its
  own variable; their slots are joined into the whole embedding's
  (`_join_shards`), so the embedding's next updates are close to T2T's, not
  equal, when T2T sharded it (the other variables' are equal).

  Returns:
    as `load_t2t_adam_state` ("adam_step_offset" is the optimizer's step offset).
  Raises:
    ValueError: the checkpoint has Adafactor slots for some variables but not
      all, or of the wrong shape.
  """
  reader = tf.train.load_checkpoint(checkpoint_path)
  shapes = reader.get_variable_to_shape_map()
  slots = {}
  for name in shapes:
    match = _ADAFACTOR_SLOT_RE.match(name)
    if match:
      slots[(match.group(1), int(match.group(2) or 0))] = name
  if not slots:
    other = sorted({m.group(1) for m in map(_OTHER_SLOT_RE.search, shapes) if m} |
                   ({"Adam"} if _slot_names(shapes) else set()))
    return {"slots": 0, "adam_step_offset": updates, "other_optimizer": ",".join(other)}
  missing, assignments, count = [], [], 0
  for variable, names in _slot_targets(model, shapes):
    have = optimizer.slots(variable)
    for index, kind in enumerate(_adafactor_kinds(optimizer, variable)):
      suffix = "Adafactor" + (f"_{index}" if index else "")
      keys = [slots.get((name, index)) for name in names]
      if None in keys:
        missing += [f"{name}/{suffix} ({kind})" for name, key in zip(names, keys) if key is None]
        continue
      value = _join_shards(kind, [reader.get_tensor(k) for k in keys],
                           [shapes[name][0] for name in names])
      if list(value.shape) != list(have[kind].shape):
        missing.append(f"{names[0]}/{suffix} ({kind}; shape {list(value.shape)}, the "
                       f"optimizer's {list(have[kind].shape)})")
        continue
      assignments.append((have[kind], value))
      count += len(names)
  if missing:
    raise ValueError(f"T2T checkpoint {checkpoint_path} lacks these Adafactor slots for the "
                     "run's optimizer_adafactor_* hparams (a damaged or partial checkpoint, "
                     "or other beta1/factored settings; pass --reset_optimizer to import the "
                     f"weights with a fresh Adafactor): {', '.join(missing)}.")
  for slot, value in assignments:
    slot.assign(value.astype(np.float32))
  return {"slots": count, "adam_step_offset": 0, "other_optimizer": ""}


def _slot_targets(model, shapes) -> List[Tuple[Any, List[str]]]:
  """(Keras variable, its T2T variable names: one, or the modality's shards in order)."""
  targets: List[Tuple[Any, List[str]]] = [(v, [name]) for name, v in
                                          body_variable_map(model).items()]
  for role, modality in modality_roles(model).items():
    found = {int(m.group(4)): n for n in shapes if (m := MODALITY_RE.match(n))
             and m.group(3) == role}
    targets.append((modality.weights_var, [found[i] for i in sorted(found)]))
  return targets
