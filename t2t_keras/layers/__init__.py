"""The Transformer's Keras layers; `HParamsConfig`, the Keras config of what an HParams builds."""

from __future__ import annotations

from typing import Tuple

from t2t_keras.hparams import HParams


class HParamsConfig:
  """Keras `get_config` / `from_config` of a layer or model built from `self.hparams`.

  Mix it in before the Keras class (`class Transformer(HParamsConfig, keras.Model)`).
  The config holds the hparams as `to_dict` (as hparams.json does) and then each
  attribute named in `CONFIG_ATTRIBUTES`, a constructor argument of the same name.
  """

  CONFIG_ATTRIBUTES: Tuple[str, ...] = ()

  def get_config(self):
    config = super().get_config()
    config["hparams"] = self.hparams.to_dict()
    config.update((name, getattr(self, name)) for name in self.CONFIG_ATTRIBUTES)
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["hparams"] = HParams.from_dict(config["hparams"])
    return cls(**config)
