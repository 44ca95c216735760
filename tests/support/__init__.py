"""What the tests share: helpers, constants, reference implementations and fixture builders.

Test modules import from here and never from one another (tests/test_layout.py checks
it); the fixtures several modules use are defined in tests/conftest.py on top of the
builders here. Modules are named by what they hold: `env` (the checkout's path, a
subprocess's environment, free ports), `tolerances`, `cli` (running the commands),
`tiny_problem` and `trained_fixture` (a small problem and a model trained on it),
`trainer_process` (the real trainer, slowed, in a subprocess), `step_utils` (single
training steps), `decode_checks` and `random_lm` (small random models and checks on
them), `t2t_checkpoint` and the `t2t_numpy_*` ports of T2T (the oracles), `near_ties`
(where two searches may part), `alignment_models`, `ptb_sample`, `stub_decoding`,
`tf_serving_harness`, and the pytest plugin `oracle_guard`.
None is a test module: pytest collects nothing here.
"""
