"""T2T's variable names (moved to `t2t_keras.t2t_weights`, below training, which reads
T2T checkpoints for its warm start too); these names stay importable from here."""

from t2t_keras.t2t_weights import (MODALITY_RE, body_variable_map, is_ignored_variable,
                                   modality_roles)

__all__ = ["MODALITY_RE", "body_variable_map", "is_ignored_variable", "modality_roles"]
