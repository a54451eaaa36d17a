# Fuzzing and sanitizer targets for the torch-free core (custom_op/csrc).
# The top-level Makefile includes this file; it also works on its own, from
# the repository root: make -f fuzz/fuzz.mk sanitize
#
#   make fuzz-tools  install clang and its fuzzer runtime (apt-get, as root)
#   make fuzz        build fuzz/decode_fuzzer.cc with libFuzzer+ASan+UBSan and
#                    fuzz for FUZZ_SECONDS (default 180) from the seed corpus
#   make fuzz-short  the same for 60 s (CI)
#   make fuzz-replay run the fuzzer over fuzz/regressions/ without fuzzing
#   make sanitize    build fuzz/core_test.cc with ASan+UBSan and run it over
#                    the seed corpus and fuzz/regressions/
#   make valgrind    build fuzz/core_test.cc without sanitizers and run it
#                    under valgrind over the sampling-factor seeds (samp-*):
#                    memcheck sees the reads of memory libjpeg never wrote,
#                    which ASan cannot (libjpeg is not instrumented)
#   make fuzz-coverage  line coverage of the core by the seed and fuzzer
#                    corpora (llvm-cov; HTML in fuzz/out/coverage/)
#
# Crashes, leaks, timeouts and OOMs go to fuzz/regressions/ (committed: each
# one is replayed by fuzz-replay, sanitize and tests/test_hostile.py). Builds,
# the seed corpus and libFuzzer's growing corpus live in fuzz/out/ (ignored).
#
# Only our code is instrumented: libjpeg-turbo is the system's shared library
# (libjpeg62-turbo 2.1.5), built without sanitizers. ASan checks every access
# our code makes (emit_row reading libjpeg's row buffer, writing the output)
# and intercepts libjpeg's malloc, memcpy and memset, but not the loads and
# stores inside libjpeg; and libFuzzer's coverage counts only the core's
# headers (custom_op/csrc/*.h) and the drivers, so it steers by our branches,
# not libjpeg's. That is the
# right scope for this project: libjpeg-turbo is fuzzed by OSS-Fuzz.

PY ?= .venv/bin/python
FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 180
FUZZ_RSS_MB ?= 2048
FUZZ_ARGS ?=
# clang++ when installed, else g++: both have ASan and UBSan.
SANITIZE_CXX ?= $(shell command -v clang++ >/dev/null 2>&1 && echo clang++ || echo g++)

FUZZ_OUT := fuzz/out
FUZZ_SEEDS := $(FUZZ_OUT)/seeds
FUZZ_CORPUS := $(FUZZ_OUT)/corpus
FUZZ_REGRESSIONS := fuzz/regressions
FUZZ_BIN := $(FUZZ_OUT)/decode_fuzzer
CORE_TEST_BIN := $(FUZZ_OUT)/core_test
CORE_TEST_PLAIN_BIN := $(FUZZ_OUT)/core_test_plain
CORE_HEADERS := $(wildcard custom_op/csrc/*.h)
CORE_TEST_HEADERS := fuzz/index_checks.h fuzz/scan_checks.h fuzz/reference_scan.h

SANITIZER_FLAGS := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
  -fno-sanitize-recover=undefined
FUZZ_FLAGS := -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined
# Set only for the sanitized programs, not for every recipe of the Makefile
# that includes this file. Leak checking stays on; a UBSan report prints the
# stack that found it.
SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

LLVM_PROFDATA ?= llvm-profdata
LLVM_COV ?= llvm-cov
COVERAGE_BIN := $(FUZZ_OUT)/decode_fuzzer_coverage

.PHONY: fuzz-tools fuzz fuzz-short fuzz-replay sanitize fuzz-corpus fuzz-coverage \
  valgrind-tools valgrind

fuzz-tools:
	@if command -v clang++ >/dev/null 2>&1 && \
	    echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' | \
	    clang++ -fsanitize=fuzzer -x c++ - -o /dev/null 2>/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing clang and its fuzzer runtime with apt-get"; \
	  apt-get update -qq && apt-get install -y -qq clang libclang-rt-14-dev; \
	else \
	  echo "clang++ with libFuzzer is missing. Install it:"; \
	  echo "  Debian 12: sudo apt-get install clang libclang-rt-14-dev"; \
	  echo "  Ubuntu:    sudo apt-get install clang"; \
	  echo "  Fedora:    sudo dnf install clang compiler-rt"; \
	  exit 1; \
	fi

$(FUZZ_BIN): fuzz/decode_fuzzer.cc fuzz/reference_scan.h $(CORE_HEADERS) | fuzz-tools
	@mkdir -p $(FUZZ_OUT)
	$(FUZZ_CXX) -std=c++17 $(FUZZ_FLAGS) -Icustom_op/csrc $< -o $@ -ljpeg

$(CORE_TEST_BIN): fuzz/core_test.cc $(CORE_TEST_HEADERS) $(CORE_HEADERS)
	@mkdir -p $(FUZZ_OUT)
	$(SANITIZE_CXX) -std=c++17 -Wall -Wextra $(SANITIZER_FLAGS) -Icustom_op/csrc $< -o $@ -ljpeg

# The same test without sanitizers, for valgrind (which cannot run ASan's).
$(CORE_TEST_PLAIN_BIN): fuzz/core_test.cc $(CORE_TEST_HEADERS) $(CORE_HEADERS)
	@mkdir -p $(FUZZ_OUT)
	$(CXX) -std=c++17 -Wall -Wextra -g -O1 -Icustom_op/csrc $< -o $@ -ljpeg

# The seed corpus is generated, not committed; a stamp marks a complete one.
$(FUZZ_SEEDS)/.done: fuzz/make_corpus.py | $(DEPS_STAMP)
	rm -rf $(FUZZ_SEEDS)
	$(PY) fuzz/make_corpus.py $(FUZZ_SEEDS)
	@touch $@

fuzz-corpus: $(FUZZ_SEEDS)/.done

# libFuzzer writes new inputs into the first folder and only reads the second.
fuzz: $(FUZZ_BIN) $(FUZZ_SEEDS)/.done fuzz/jpeg.dict
	@mkdir -p $(FUZZ_CORPUS) $(FUZZ_REGRESSIONS)
	$(SANITIZER_ENV) ./$(FUZZ_BIN) $(FUZZ_CORPUS) $(FUZZ_SEEDS) -dict=fuzz/jpeg.dict \
	  -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=$(FUZZ_RSS_MB) \
	  -artifact_prefix=$(FUZZ_REGRESSIONS)/ -print_final_stats=1 $(FUZZ_ARGS)

fuzz-short:
	$(MAKE) -f $(firstword $(MAKEFILE_LIST)) fuzz FUZZ_SECONDS=60

# Passing files (not a folder) makes libFuzzer run each once and stop.
fuzz-replay: $(FUZZ_BIN)
	@files=$$(find $(FUZZ_REGRESSIONS) -type f ! -name '.*' ! -name README.md 2>/dev/null | sort); \
	if [ -z "$$files" ]; then echo "fuzz-replay: no files in $(FUZZ_REGRESSIONS)/"; \
	else $(SANITIZER_ENV) ./$(FUZZ_BIN) -timeout=10 -rss_limit_mb=$(FUZZ_RSS_MB) $$files; fi

sanitize: $(CORE_TEST_BIN) $(FUZZ_SEEDS)/.done
	@mkdir -p $(FUZZ_REGRESSIONS)
	$(SANITIZER_ENV) ./$(CORE_TEST_BIN) $(FUZZ_SEEDS) $(FUZZ_REGRESSIONS)

# Runs each input of the corpora once (-runs=0) through a build without
# sanitizers that records which lines of the core ran.
fuzz-coverage: $(FUZZ_SEEDS)/.done | fuzz-tools
	@mkdir -p $(FUZZ_CORPUS)
	$(FUZZ_CXX) -std=c++17 -g -O1 -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping \
	  -Icustom_op/csrc fuzz/decode_fuzzer.cc -o $(COVERAGE_BIN) -ljpeg
	LLVM_PROFILE_FILE=$(FUZZ_OUT)/coverage.profraw ./$(COVERAGE_BIN) -runs=0 $(FUZZ_SEEDS) $(FUZZ_CORPUS)
	$(LLVM_PROFDATA) merge -sparse $(FUZZ_OUT)/coverage.profraw -o $(FUZZ_OUT)/coverage.profdata
	$(LLVM_COV) show $(COVERAGE_BIN) -instr-profile=$(FUZZ_OUT)/coverage.profdata -format=html \
	  -output-dir=$(FUZZ_OUT)/coverage $(CORE_HEADERS)
	$(LLVM_COV) report $(COVERAGE_BIN) -instr-profile=$(FUZZ_OUT)/coverage.profdata \
	  $(CORE_HEADERS)

valgrind-tools:
	@if command -v valgrind >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing valgrind with apt-get"; \
	  apt-get update -qq && apt-get install -y -qq valgrind; \
	else \
	  echo "valgrind is missing. Install it:"; \
	  echo "  Debian, Ubuntu: sudo apt-get install valgrind"; \
	  echo "  Fedora:         sudo dnf install valgrind"; \
	  exit 1; \
	fi

# Uninitialised reads inside libjpeg (a faulty jpeg_crop_scanline leaves
# rows half upsampled) reach our resampler as values; memcheck reports the
# first branch on them. Only the sampling-factor seeds and one grayscale
# file (1-channel windows, as EXIF-turned files ask for them: core_test's
# check_narrow_windows): under valgrind the whole corpus would take many
# minutes. libjpeg-turbo's SIMD code runs off:
# its h2v1 upsampler reads a vector past a cropped row's end and memcheck,
# which tracks definedness per lane only roughly, then flags the last pixel
# (which equals the plain C code's bit for bit: core_test compares it with a
# decode of every column). JSIMD_FORCENONE selects libjpeg's C code.
valgrind: $(CORE_TEST_PLAIN_BIN) $(FUZZ_SEEDS)/.done | valgrind-tools
	JSIMD_FORCENONE=1 valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
	  --track-origins=yes --quiet ./$(CORE_TEST_PLAIN_BIN) $(FUZZ_SEEDS)/samp-*.jpg \
	  $(FUZZ_SEEDS)/base-gray-q90-48x64.jpg
