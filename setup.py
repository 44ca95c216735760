"""t2t-keras: Tensor2Tensor's Transformer on TensorFlow 2.21 / Keras 3."""

import pathlib
import re

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).resolve().parent
# The version is set in t2t_keras/version.py only (read as text: importing the package here
# would need its dependencies before they are installed).
VERSION = re.search(r'^__version__ = "([^"]+)"', (HERE / "t2t_keras" / "version.py").read_text(),
                    re.M).group(1)

CONSOLE_SCRIPTS = [
    # Each entry is added only once its command works end to end.
    "t2t_keras_datagen = t2t_keras.cli.datagen:main",
    "t2t_keras_trainer = t2t_keras.cli.trainer:run",
    "t2t_keras_decoder = t2t_keras.cli.decoder:run",
    "t2t_keras_avg_checkpoints = t2t_keras.cli.avg_checkpoints:run",
    "t2t_keras_bleu = t2t_keras.cli.bleu:run",
    "t2t_keras_parse_eval = t2t_keras.cli.parse_eval:run",
    "t2t_keras_visualize = t2t_keras.cli.visualize:run",
    "t2t_keras_exporter = t2t_keras.cli.exporter:run",
    "t2t_keras_query = t2t_keras.cli.query:run",
    "t2t_keras_import_checkpoint = t2t_keras.cli.import_checkpoint:run",
]

setup(
    name="t2t-keras",
    version=VERSION,
    description="The Transformer of 'Attention Is All You Need', faithful to Tensor2Tensor, "
                "on TensorFlow 2.21 and Keras 3.",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",  # Tensor2Tensor's licence
    license_files=["LICENSE", "NOTICE"],
    # flags/ (the experiment flagfiles) is installed as the data package t2t_keras.flagfiles, so
    # that `--flagfile=demo.flags` works from any directory after a pip install.
    packages=find_packages(include=["t2t_keras", "t2t_keras.*", "data_gen", "data_gen.*"])
    + ["t2t_keras.flagfiles"],
    package_dir={"t2t_keras.flagfiles": "flags"},
    package_data={"t2t_keras.flagfiles": ["*.flags"]},
    # TensorFlow 2.21 and tensorflow-text 2.21 publish wheels for CPython 3.10-3.13.
    # The Makefile reads this line to check the interpreter before installing.
    python_requires=">=3.10,<3.14",
    install_requires=[
        "tensorflow==2.21.*",
        "keras>=3.10,<4",
        "tensorflow-text==2.21.*",
        "tensorflow-datasets==4.9.*",
        # tensorflow-datasets 4.9 imports importlib_resources in every builder (the WMT ones
        # too) but declares it only for Python < 3.9, and etils no longer brings it.
        # Its importlib_resources.abc.Traversable is in every 5.x and later.
        "importlib_resources>=5.0",
        # tensorflow-datasets downloads with requests; the WMT problems catch its errors
        # to report a failed download in one line.
        "requests>=2.19",
        "sacrebleu>=2.3,<3",
        "absl-py>=2.1",
        # tf.summary needs TensorBoard, which TensorFlow 2.21 no longer installs.
        "tensorboard>=2.20",
        # TF Serving's PredictionLog (warm-up requests) and gRPC client stubs.
        "tensorflow-serving-api==2.21.*",
        # Moses' punctuation normaliser and tokenizer for the paper's tokenized BLEU
        # (T2T's get_ende_bleu.sh), maintained in Python.
        "sacremoses>=0.1,<0.3",
        # Trains and reads --vocab_type=sentencepiece vocabularies (its wheels bundle their own
        # library; its model proto module also loads with TensorFlow's protobuf).
        "sentencepiece>=0.2,<0.3",
    ],
    extras_require={
        # pytest-xdist: the suite runs on both cores (most tests are single-threaded tracing and
        # subprocess start-up), which keeps CI under 15 minutes.
        "test": ["pytest>=8", "hypothesis>=6.100", "pytest-xdist>=3.5"],
        "viz": ["matplotlib>=3.8"],
        # CTranslate2 (MIT): int8 / float32 CPU inference without TensorFlow
        # (t2t_keras_exporter --export_format=ctranslate2, t2t_keras_decoder --engine=ctranslate2).
        "ct2": ["ctranslate2>=4.8,<5"],
    },
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
)
