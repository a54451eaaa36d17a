# make check  - create .venv if missing, install what is needed, build, then a quick
#               check: decode a file, a few seconds of a DataLoader (python -m custom_op.check)
# make test   - the same deps, then the tests (in parallel workers: PYTEST_WORKERS=0 for one process)
# make bench  - the same, then every benchmark part on generated and real photos
# Override PYTHON (the interpreter that creates .venv) or TORCH_PINS if needed.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ARCH := $(shell uname -m)
# torch and torchvision releases that import together (and, on the machines
# this project is developed on, lie on the local disk).
ifeq ($(ARCH),aarch64)
TORCH_PINS ?= torch==2.9.1 torchvision==0.24.1
else
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
endif
DEPS_STAMP := $(VENV)/.deps-$(shell echo '$(TORCH_PINS)' | cat - requirements-dev.txt | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=
# pytest-xdist workers (one per core by default), each taking whole test files
# (--dist loadfile), so that a module's expensive fixtures (a cold build, a local
# SageMaker job) are made once. (--dist loadgroup with xdist_group marks no longer
# groups anything under pytest 9.2: pytest-dev/pytest-xdist#1386. Every such fixture
# was made twice, a minute of the run.)
PYTEST_WORKERS ?= auto
PYTEST_PARALLEL := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)
BENCH_ARGS ?=

.PHONY: all check test bench bench-photos deps jpeg-headers clean

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)

# custom_op itself goes in editable (python -m custom_op.prepare works from any
# folder) and builds nothing now: a checkout builds on first use, once.
$(DEPS_STAMP): requirements-dev.txt pyproject.toml setup.py | $(PY)
	$(PY) -m pip install --upgrade-strategy only-if-needed $(TORCH_PINS) -r requirements-dev.txt
	$(PY) -m pip install --no-build-isolation --no-deps --editable .
	rm -f $(VENV)/.deps-*
	touch $@

deps: $(DEPS_STAMP) jpeg-headers

# libjpeg-turbo's headers: installed with apt-get when missing and we are root,
# otherwise we say what to install.
jpeg-headers:
	@if printf '#include <stdio.h>\n#include <jpeglib.h>\n' | cc -E -x c - >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing libjpeg-turbo headers with apt-get"; \
	  apt-get update -qq && (apt-get install -y -qq libjpeg62-turbo-dev || apt-get install -y -qq libjpeg-turbo8-dev); \
	else \
	  echo "libjpeg-turbo headers (jpeglib.h) are missing. Install them:"; \
	  echo "  Debian: sudo apt-get install libjpeg62-turbo-dev"; \
	  echo "  Ubuntu: sudo apt-get install libjpeg-turbo8-dev"; \
	  echo "  Fedora: sudo dnf install libjpeg-turbo-devel"; \
	  echo "  conda:  conda install -c conda-forge libjpeg-turbo"; \
	  exit 1; \
	fi

# A real photo for the check to decode when the benchmark's are installed.
CHECK_PHOTO := $(wildcard /usr/share/backgrounds/Bridge_by_Sander_Klootwijk.jpg)
check: deps
	$(PY) -m custom_op.check $(if $(CHECK_PHOTO),--photo $(CHECK_PHOTO))

test: deps
	$(PY) -m pytest tests $(PYTEST_PARALLEL) $(PYTEST_ARGS)

BENCH_STAMP := $(VENV)/.bench-deps-$(shell cat bench/requirements.txt | cksum | cut -d' ' -f1)

$(BENCH_STAMP): bench/requirements.txt | $(DEPS_STAMP)
	$(PY) -m pip install -r bench/requirements.txt
	rm -f $(VENV)/.bench-deps-*
	touch $@

bench: deps bench-photos $(BENCH_STAMP)
	$(PY) -m bench $(BENCH_ARGS)

# The benchmark's real photos: Debian's wallpaper package, installed with
# apt-get when missing and we are root, otherwise we say what to install
# (the benchmark then runs on generated images only). scikit-learn's two
# sample images are read from its wheel by bench/photos.py.
BENCH_PHOTOS_PACKAGE := lomiri-wallpapers-16.04
bench-photos:
	@if [ -f /usr/share/backgrounds/Bridge_by_Sander_Klootwijk.jpg ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing the benchmark's photos ($(BENCH_PHOTOS_PACKAGE)) with apt-get"; \
	  apt-get update -qq && apt-get install -y -qq $(BENCH_PHOTOS_PACKAGE); \
	else \
	  echo "No $(BENCH_PHOTOS_PACKAGE) photos: the benchmark runs on generated images only."; \
	  echo "  For real photos (Debian, Ubuntu): sudo apt-get install $(BENCH_PHOTOS_PACKAGE)"; \
	fi

# Fuzzing and sanitizers, and the local SageMaker runs.
include fuzz/fuzz.mk
include sagemaker/sagemaker.mk

clean:
	rm -rf custom_op/_build custom_op/_prebuilt bench/results .pytest_cache build *.egg-info
