"""Scoring of outputs: BLEU and EVALB."""
