# Two commands: `make run` (the default experiment) and `make test`. Both create .venv with the pinned
# dependencies on first use. Extra Hydra overrides go in ARGS, e.g. make run ARGS="algo=fedavgm seed=1".
PY ?= python3.11
VENV := .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt setup.cfg | cksum | cut -d' ' -f1)
CLUSTER_STAMP := $(VENV)/.cluster-$(shell cksum requirements-cluster.txt | cut -d' ' -f1)
DOCS_STAMP := $(VENV)/.docs-$(shell cksum requirements-docs.txt | cut -d' ' -f1)
FMNIST_DEBIAN := /usr/share/datasets/fashion-mnist
ARGS ?=

.PHONY: run test test-slow bench report reproduce fmnist cluster docs clean

$(STAMP): requirements.txt setup.cfg
	@test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(PYTHON) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PYTHON) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@rm -f $(VENV)/.installed-* && touch $@

# The Ray launcher's stack (large; only the slow tests and hydra/launcher=ray need it).
$(CLUSTER_STAMP): requirements-cluster.txt $(STAMP)
	$(PYTHON) -m pip install -q --disable-pip-version-check -r requirements.txt -r requirements-cluster.txt
	@rm -f $(VENV)/.cluster-* && touch $@

cluster: $(CLUSTER_STAMP)

# The documentation site (MkDocs + Material), built strictly: a broken link or a page left out of the nav fails.
$(DOCS_STAMP): requirements-docs.txt $(STAMP)
	$(PYTHON) -m pip install -q --disable-pip-version-check -r requirements-docs.txt
	@rm -f $(VENV)/.docs-* && touch $@

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# FashionMNIST: Debian's dataset-fashion-mnist where apt is usable, else torchvision's download into data/.
fmnist: $(STAMP)
	@if [ ! -d $(FMNIST_DEBIAN) ] && [ ! -d data/FashionMNIST/raw ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -qq dataset-fashion-mnist || (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist); \
	  fi; \
	fi
	@if [ ! -d $(FMNIST_DEBIAN) ] && [ ! -d data/FashionMNIST/raw ]; then \
	  $(PYTHON) -c "import torchvision as tv; [tv.datasets.FashionMNIST('data', train=t, download=True) for t in (True, False)]" \
	  || echo "warning: FashionMNIST could not be installed or downloaded; see README (Data)"; \
	fi

run: $(STAMP) fmnist
	$(PYTHON) run.py $(ARGS)

test: $(STAMP)
	$(PYTHON) -m pytest

test-slow: $(STAMP) $(CLUSTER_STAMP) fmnist
	$(PYTHON) -m pytest -m slow

bench: $(STAMP) fmnist
	$(PYTHON) scripts/bench.py $(ARGS)

# make reproduce PAPER=wang22|mimic|fedsrc|fedamd|gradma [SCALE=small|full] [ARGS="--section periodic"]: a paper's
# comparisons of docs/reproductions.md end to end through fedbench-tune; rerunning continues them.
PAPER ?=
SCALE ?= small
reproduce: $(STAMP) fmnist
	@test -n "$(PAPER)" || (echo "make reproduce: set PAPER to one of wang22, mimic, fedsrc, fedamd, gradma"; exit 2)
	$(PYTHON) scripts/reproduce.py $(PAPER) --scale $(SCALE) $(ARGS)

# make report DIR=outputs/multirun/<date>/<time> [ARGS="--targets 0.7 0.8"]
report: $(STAMP)
	@test -n "$(DIR)" || (echo "usage: make report DIR=outputs/multirun/<date>/<time>" && exit 2)
	$(VENV)/bin/fedbench-report $(DIR) $(ARGS)

clean:
	rm -rf outputs multirun site .pytest_cache
