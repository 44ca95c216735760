"""Pictures of a trained Transformer: attention heatmaps and training curves.

T2T showed attention in a notebook (`visualization/attention.py`: encoder,
decoder and encoder-decoder weights of every layer and head for one sentence).
Here the same three kinds of weights are the ones the model's teacher-forced
forward pass returns (`return_attention_scores=True`), written as PNG files; the
training curves (loss and BLEU over steps) are read from a run's TensorBoard
event files.

Plots use matplotlib's Agg renderer through `matplotlib.figure.Figure` (no
pyplot global state); install it with `pip install matplotlib` (or, in a clone of
the repository, `pip install -e '.[viz]'`). Images have
exactly the requested pixel size and are written atomically.
"""

from __future__ import annotations

import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from data_gen import file_io
from data_gen.text_encoder import EOS_ID
from t2t_keras.decoding import seq2seq
from t2t_keras.hparams import DecodeHParams
from t2t_keras.model import Transformer
from t2t_keras.rundir.files import RunDir

KINDS = ("encoder", "decoder", "encdec")  # the fields of model.AttentionScores
# Default picture sizes in pixels (width, height) at DPI dots per inch.
DPI = 100
HEATMAP_SIZE = (640, 640)
CURVES_SIZE = (1200, 500)
GRID_PANEL_PX = 300  # A grid of heads is (300 * cols + 100) x (300 * rows + 100) pixels.
_AXES = {"encoder": ("inputs", "inputs"), "decoder": ("targets", "targets"),
         "encdec": ("targets", "inputs")}

Maps = Dict[str, List[np.ndarray]]


# -- Attention weights ---------------------------------------------------------

def _as_ids(name: str, ids, vocab_size: int) -> tf.Tensor:
  """One sentence of ids, `[length]` or `[1, length]` -> int32 `[1, length]`."""
  array = np.asarray(ids)
  if array.ndim == 2 and array.shape[0] == 1:
    array = array[0]
  if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.integer):
    raise ValueError(f"{name} must be one non-empty sentence of int ids ([length] or "
                     f"[1, length]), got shape {array.shape} and dtype {array.dtype}.")
  if array.min() < 0 or array.max() >= vocab_size:
    raise ValueError(f"{name} must be ids in [0, {vocab_size}) (the model's vocabulary), "
                     f"got {array.tolist()}.")
  return tf.constant(array[None], tf.int32)


def attention_maps(model: Transformer, input_ids, target_ids) -> Maps:
  """Attention weights of every layer and head for one sentence pair.

  The weights of the teacher-forced forward pass (`model(features,
  return_attention_scores=True)`), with dropout off.

  Args:
    model: a built Transformer.
    input_ids: `[input_length]` (or `[1, input_length]`) source ids, EOS included.
    target_ids: `[target_length]` target ids, EOS included.

  Returns:
    {"encoder": per encoder layer float32 `[heads, input_length, input_length]`,
     "decoder": per decoder layer `[heads, target_length, target_length]`,
     "encdec": per decoder layer `[heads, target_length, input_length]`};
    rows are queries, columns keys, and each row sums to 1.
  """
  if not model.built:
    raise ValueError("model must be built: call model.build() before attention_maps.")
  inputs = _as_ids("input_ids", input_ids, model.input_vocab_size)
  targets = _as_ids("target_ids", target_ids, model.target_vocab_size)
  _, scores = model({"inputs": inputs, "targets": targets}, training=False,
                    return_attention_scores=True)
  return {kind: [np.asarray(tf.cast(w[0], tf.float32)) for w in getattr(scores, kind)]
          for kind in KINDS}


def greedy_decode(model: Transformer, input_ids, extra_length: int = 50) -> List[int]:
  """Argmax translation of one sentence, as `t2t_keras_decoder` with beam_size=1.

  Uses `decoding.decode_ids` (cached incremental decoding, T2T's greedy loop:
  it stops at the first EOS or, without EOS, at input length + `extra_length`).

  Returns:
    target ids up to and including the first EOS, or all of them at the cap.
  """
  if extra_length < 1:
    raise ValueError(f"extra_length must be >= 1, got {extra_length}.")
  inputs = _as_ids("input_ids", input_ids, model.input_vocab_size)
  decode_hp = DecodeHParams(beam_size=1, extra_length=extra_length, sampling_method="argmax")

  @tf.function(autograph=False)  # Plain tf.while_loop inside; conversion is slow.
  def run(inputs):
    return seq2seq.decode_ids(model, inputs, decode_hp)[0]

  ids = run(inputs).numpy()[0].tolist()
  return ids[:ids.index(EOS_ID) + 1] if EOS_ID in ids else ids


# -- Heatmaps ------------------------------------------------------------------

def check_selection(kinds: Sequence[str], layer: Optional[int], head: Optional[int],
                    num_layers: Dict[str, int], num_heads: int) -> None:
  """Raises ValueError for an unknown kind or a layer/head out of range.

  Args:
    num_layers: {"encoder": n, "decoder": n, "encdec": n} of the model.
  """
  for kind in kinds:
    if kind not in KINDS:
      raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    if layer is not None and not 0 <= layer < num_layers[kind]:
      raise ValueError(f"layer must be in [0, {num_layers[kind]}) for {kind} attention "
                       f"(the model has {num_layers[kind]} layers), got {layer}.")
  if head is not None and not 0 <= head < num_heads:
    raise ValueError(f"head must be in [0, {num_heads}) (the model has {num_heads} heads), "
                     f"got {head}.")


def grid_shape(num_heads: int) -> Tuple[int, int]:
  """(rows, cols) of the head grid: cols = ceil(sqrt(heads))."""
  cols = math.ceil(math.sqrt(num_heads))
  return math.ceil(num_heads / cols), cols


def grid_size(num_heads: int) -> Tuple[int, int]:
  """Default (width, height) in pixels of a grid of `num_heads` heatmaps."""
  rows, cols = grid_shape(num_heads)
  return GRID_PANEL_PX * cols + 100, GRID_PANEL_PX * rows + 100


MATPLOTLIB_MISSING = ("pictures need matplotlib, which is not installed: run pip install "
                      "matplotlib (or, in a clone of the repository, pip install -e '.[viz]').")


def check_matplotlib() -> None:
  """Raises ImportError(MATPLOTLIB_MISSING) unless matplotlib imports."""
  try:
    import matplotlib  # noqa: F401  (optional dependency)  pylint: disable=unused-import
  except ImportError as e:
    raise ImportError(MATPLOTLIB_MISSING) from e


def _figure(size: Tuple[int, int], dpi: int):
  check_matplotlib()
  from matplotlib.figure import Figure  # optional dependency (the viz extra)
  width, height = size
  if width < 50 or height < 50:
    raise ValueError(f"size must be at least 50x50 pixels, got {size}.")
  # Agg truncates width * dpi / dpi to int: a tiny excess keeps the exact size.
  return Figure(figsize=((width + 1e-3) / dpi, (height + 1e-3) / dpi), dpi=dpi,
                layout="constrained")


def _save(fig, path: str, dpi: int) -> str:
  """Writes `fig` as PNG to `path` via a temporary name (never a half-written file)."""
  with file_io.atomic_open(path, "wb") as f:
    fig.savefig(f, format="png", dpi=dpi)
  return path


def _label(token: str) -> str:
  return token.replace("$", r"\$")  # "$" would start matplotlib mathtext.


def _draw(ax, weights: np.ndarray, query_tokens, key_tokens, font_size: float,
          x_labels: bool = True, y_labels: bool = True):
  image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto",
                    interpolation="nearest")
  # Ticks are costly matplotlib objects: inner panels of a grid get none.
  if x_labels:
    ax.set_xticks(range(len(key_tokens)), [_label(t) for t in key_tokens], rotation=90,
                  fontsize=font_size)
  else:
    ax.set_xticks([])
  if y_labels:
    ax.set_yticks(range(len(query_tokens)), [_label(t) for t in query_tokens],
                  fontsize=font_size)
  else:
    ax.set_yticks([])
  return image


def _check_tokens(weights: np.ndarray, query_tokens, key_tokens) -> None:
  if weights.shape[-2:] != (len(query_tokens), len(key_tokens)):
    raise ValueError(f"weights of shape {weights.shape} need {weights.shape[-2]} query and "
                     f"{weights.shape[-1]} key tokens, got {len(query_tokens)} and "
                     f"{len(key_tokens)}.")


def _font_size(panel_px: float, dpi: int, tokens: int) -> float:
  return float(np.clip(0.5 * panel_px / dpi * 72 / max(tokens, 1), 3.0, 10.0))


def plot_attention(weights: np.ndarray, query_tokens: Sequence[str],
                   key_tokens: Sequence[str], title: str, path: str,
                   size: Tuple[int, int] = HEATMAP_SIZE, dpi: int = DPI,
                   axis_names: Tuple[str, str] = ("queries", "keys")) -> str:
  """Writes one heatmap `[length_q, length_kv]` with token labels and a colorbar.

  Returns:
    `path`, a PNG of exactly `size` = (width, height) pixels.
  """
  weights = np.asarray(weights)
  if weights.ndim != 2:
    raise ValueError(f"weights must be [length_q, length_kv], got shape {weights.shape}.")
  _check_tokens(weights, query_tokens, key_tokens)
  fig = _figure(size, dpi)
  ax = fig.subplots()
  image = _draw(ax, weights, query_tokens, key_tokens,
                _font_size(0.75 * min(size), dpi, max(weights.shape)))
  ax.set_ylabel(axis_names[0])
  ax.set_xlabel(axis_names[1])
  ax.set_title(title)
  fig.colorbar(image, ax=ax)
  return _save(fig, path, dpi)


def plot_attention_heads(weights: np.ndarray, query_tokens: Sequence[str],
                         key_tokens: Sequence[str], title: str, path: str,
                         size: Optional[Tuple[int, int]] = None, dpi: int = DPI) -> str:
  """Writes a grid of the heatmaps of all heads, `weights` `[heads, length_q, length_kv]`.

  Token labels are on the left column and the lowest panel of each column; one
  colorbar serves all panels. `size` defaults to `grid_size(heads)`.
  """
  weights = np.asarray(weights)
  if weights.ndim != 3:
    raise ValueError(f"weights must be [heads, length_q, length_kv], got {weights.shape}.")
  _check_tokens(weights, query_tokens, key_tokens)
  heads = weights.shape[0]
  rows, cols = grid_shape(heads)
  size = size or grid_size(heads)
  fig = _figure(size, dpi)
  axes = fig.subplots(rows, cols, squeeze=False).ravel()
  font = _font_size(0.8 * min(size[0] / cols, size[1] / rows), dpi, max(weights.shape[1:]))
  for h, ax in enumerate(axes):
    if h >= heads:
      ax.set_axis_off()
      continue
    image = _draw(ax, weights[h], query_tokens, key_tokens, font,
                  x_labels=h + cols >= heads, y_labels=h % cols == 0)
    ax.set_title(f"head {h}", fontsize=9)
  fig.suptitle(title)
  fig.colorbar(image, ax=axes[:heads].tolist())
  return _save(fig, path, dpi)


def write_attention_plots(maps: Maps, input_tokens: Sequence[str],
                          target_tokens: Sequence[str], plot_dir: str,
                          kinds: Sequence[str] = KINDS, layer: Optional[int] = None,
                          head: Optional[int] = None) -> List[str]:
  """Writes heatmaps of `attention_maps` output for the chosen kinds, layers, heads.

  Args:
    maps: from `attention_maps`.
    input_tokens / target_tokens: labels of the input and target positions
      (subword pieces, EOS included).
    kinds: subset of KINDS.
    layer: one layer, or None for every layer.
    head: one head (file `<kind>_layer<l>_head<h>.png`), or None for a grid of
      all heads (`<kind>_layer<l>_heads.png`).

  Returns:
    the paths written.
  """
  num_layers = {kind: len(maps[kind]) for kind in KINDS}
  check_selection(kinds, layer, head, num_layers, maps["encoder"][0].shape[0])
  tokens = {"inputs": list(input_tokens), "targets": list(target_tokens)}
  paths = []
  for kind in kinds:
    query_axis, key_axis = _AXES[kind]
    layers = range(num_layers[kind]) if layer is None else [layer]
    for l in layers:
      name = f"{kind} attention, layer {l}"
      args = (tokens[query_axis], tokens[key_axis])
      if head is None:
        path = os.path.join(plot_dir, f"{kind}_layer{l}_heads.png")
        paths.append(plot_attention_heads(maps[kind][l], *args, f"{name}, all heads", path))
      else:
        path = os.path.join(plot_dir, f"{kind}_layer{l}_head{head}.png")
        paths.append(plot_attention(maps[kind][l][head], *args, f"{name}, head {head}", path,
                                    axis_names=(f"queries: {query_axis}",
                                                f"keys: {key_axis}")))
  return paths


# -- Training curves -----------------------------------------------------------

def _scalar_value(value) -> Optional[float]:
  """A summary value as float, or None if it is not a numeric scalar."""
  if value.HasField("simple_value"):  # TF1 / tf.compat.v1 summaries
    return float(value.simple_value)
  if value.HasField("tensor"):  # TF2 tf.summary.scalar writes 0-d tensors
    array = tf.make_ndarray(value.tensor)
    if array.ndim == 0 and np.issubdtype(array.dtype, np.number):
      return float(array)
  return None


def read_scalars(log_dir: str) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
  """Scalars of the TensorBoard event files directly in `log_dir` (not subdirectories).

  When a step was logged twice (a run resumed from an earlier checkpoint), the
  value written last wins. A truncated final record (a writer still running) ends
  the reading of that file.

  Returns:
    {tag: (steps int64 `[n]` ascending, values float64 `[n]`)}.
  """
  records: Dict[str, Dict[int, Tuple[float, float]]] = {}
  for path in sorted(tf.io.gfile.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
    try:
      for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        event = tf.compat.v1.Event.FromString(record)
        for value in event.summary.value:
          number = _scalar_value(value)
          if number is None:
            continue
          old = records.setdefault(value.tag, {}).get(event.step)
          if old is None or event.wall_time >= old[0]:
            records[value.tag][event.step] = (event.wall_time, number)
    except tf.errors.DataLossError:
      pass
  out = {}
  for tag, by_step in records.items():
    steps = np.array(sorted(by_step), np.int64)
    out[tag] = steps, np.array([by_step[s][1] for s in steps.tolist()], np.float64)
  return out


def plot_training_curves(output_dir: str, path: str, size: Tuple[int, int] = CURVES_SIZE,
                         dpi: int = DPI) -> str:
  """Plots train and eval loss (left) and BLEU (right) over steps of a run.

  Reads `output_dir` (train scalars) and `output_dir/eval` (eval scalars; every
  tag containing "bleu" is drawn). Without BLEU the right panel says so.

  Raises:
    ValueError: no `loss` scalar in either directory.
  """
  train = read_scalars(output_dir)
  eval_dir = RunDir(output_dir).eval_dir
  evals = read_scalars(eval_dir) if tf.io.gfile.isdir(eval_dir) else {}
  if "loss" not in train and "loss" not in evals:
    raise ValueError(f"No 'loss' scalars in the TensorBoard event files of {output_dir} or "
                     f"{eval_dir}: is output_dir a t2t_keras_trainer --output_dir that has "
                     "logged at least once?")
  fig = _figure(size, dpi)
  loss_ax, bleu_ax = fig.subplots(1, 2)
  for name, scalars, style in (("train loss", train, "-"), ("eval loss", evals, "o-")):
    if "loss" in scalars:
      loss_ax.plot(*scalars["loss"], style, label=name, markersize=4)
  loss_ax.set_xlabel("step")
  loss_ax.set_ylabel("loss")
  loss_ax.set_title("loss")
  loss_ax.legend()
  bleu_tags = sorted(tag for tag in evals if "bleu" in tag.lower())
  for tag in bleu_tags:
    bleu_ax.plot(*evals[tag], "o-", label=tag, markersize=4)
  bleu_ax.set_xlabel("step")
  bleu_ax.set_ylabel("BLEU")
  if bleu_tags:
    bleu_ax.set_title("eval BLEU")
    bleu_ax.legend()
  else:
    bleu_ax.set_title("BLEU: none logged")
    bleu_ax.text(0.5, 0.5, f"no BLEU scalars in {eval_dir}\n(train with --eval_bleu)",
                 ha="center", va="center", transform=bleu_ax.transAxes, wrap=True)
    bleu_ax.set_xticks([])
    bleu_ax.set_yticks([])
  fig.suptitle(f"training curves of {output_dir}")
  return _save(fig, path, dpi)
