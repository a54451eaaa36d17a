#!/usr/bin/env python3
"""Shows the quick suite's power: deliberate defects of the product code that it must catch.

Each defect of DEFECTS is one realistic bug, written as a replacement of an exact text of one
file of custom_op/ (the text must occur exactly once, so the script breaks loudly when the code
moves). For each defect, one at a time, the script makes a fresh git worktree of HEAD in a
temporary folder (the checkout's own files are never touched, not even when the script is
killed), applies the defect there and runs the quick suite in it as ``make test-quick`` does,
stopping at the first failure:

    <repo>/.venv/bin/python -m pytest tests --quick -n auto --dist loadfile -x -q -p no:cacheprovider

A defect is CAUGHT when a test fails (its node id is printed), MISSED when the suite passes,
BROKEN when the run fails without a failing test (a collection error, a build that does not
compile), TIMEOUT when it runs too long and NOT APPLIED when its text does not match exactly once.
A defect of the C++ sources changes the build key, so its worktree builds the extension on first
import (about a minute on 2 cores) into the worktree's own custom_op/_build/, removed with it;
defects of Python files reuse the build of HEAD's key. Each run has its own XDG_CACHE_HOME and
TMPDIR, removed afterwards, and PYTHONPATH names the worktree, so that the tests' own Pythons
import the defective copy, not the checkout's.

Usage (from anywhere; standard library only):

    python tests/mutants.py --list       # the defects
    python tests/mutants.py NAME...      # some of them (no baseline run unless --baseline)
    python tests/mutants.py              # a baseline run of HEAD, then every defect; the
                                         # output also goes to tests/mutants.txt
    make mutants                         # the same as the last

The exit status is 1 when a defect was not caught (MISSED, BROKEN, TIMEOUT, NOT APPLIED) or the
baseline failed, else 0. PYTEST_WORKERS=0 runs the suite in one process, as it does for make.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple, Optional

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "tests" / "mutants.txt"
PYTHON = REPO / ".venv" / "bin" / "python"
#: The Makefile's PYTEST_PARALLEL (PYTEST_WORKERS, default auto; 0: one process).
WORKERS = os.environ.get("PYTEST_WORKERS", "auto")
PARALLEL = [] if WORKERS == "0" else ["-n", WORKERS, "--dist", "loadfile"]
#: make test-quick's command, plus -x (stop at the first failure) and no cache folder.
SUITE = ["-m", "pytest", "tests", "--quick", *PARALLEL, "-x", "-q", "-p", "no:cacheprovider"]
#: A run longer than this is stopped (a hang is reported as TIMEOUT, not as caught).
TIMEOUT_SECONDS = 1200
#: The prefix of every temporary folder the script makes (a worktree's lies inside one).
PREFIX = "custom_op-mutant-"


class Defect(NamedTuple):
    name: str
    path: str  # relative to the repository
    old: str   # must occur exactly once in the file
    new: str


DEFECTS = [
    # 1. Crop margin off by one: the column right of the window is not decoded when the window
    #    ends one column before the image's edge, so its last column is upsampled as an edge.
    Defect("crop-margin-off-by-one", "custom_op/csrc/region.h",
           "right = right < in.image_width ? right + 1 : right;",
           "right = right < in.image_width - 1 ? right + 1 : right;"),
    # 2. Wrong DC predictor: an index entry's predictors are restored from the previous entry
    #    instead of the entry above, which the writer predicts them from.
    Defect("index-dc-predictor-wrong-entry", "custom_op/csrc/mcu_index.h",
           "const int64_t value = predictors[reference * components + c] + unzigzag(residual);",
           "const int64_t value = predictors[(e - 1) * components + c] + unzigzag(residual);"),
    # 3. Flip on the wrong axis: the fused head's RandomHorizontalFlip flips rows (upside down).
    Defect("fused-flip-rows", "custom_op/_torchvision/_fused_head.py",
           "output = output.as_subclass(torch.Tensor).flip(-1).as_subclass(tv_tensors.Image)",
           "output = output.as_subclass(torch.Tensor).flip(-2).as_subclass(tv_tensors.Image)"),
    # 4. EXIF orientations swapped: 6 (rotate 90 clockwise) and 8 (90 counter-clockwise) exchanged.
    Defect("exif-6-8-swapped", "custom_op/_decode/_orientation.py",
           "    6: Turn(True, False, True),\n    7: Turn(True, True, True),\n"
           "    8: Turn(False, True, True),",
           "    6: Turn(False, True, True),\n    7: Turn(True, True, True),\n"
           "    8: Turn(True, False, True),"),
    # 5. Skipped bounds check: a crop window that runs past the image's bottom is accepted.
    Defect("window-bottom-unchecked", "custom_op/csrc/region.h",
           "w.height <= height - w.y && w.width <= width - w.x;",
           "w.width <= width - w.x;"),
    # 6. Lane draw from the global generator: the flip's draw ignores the sample's generator.
    Defect("lane-flip-global-rng", "custom_op/lane/_random_streams.py",
           "return torch.rand(1, generator=generator).item() < below",
           "return torch.rand(1).item() < below"),
    # 7. Prepare drops trailing bytes: a file with data after its EOI is rewritten without it
    #    instead of refused.
    Defect("prepare-drops-trailer", "custom_op/csrc/prepare.h",
           "    if (src_.src->bytes_in_buffer != 0) {\n"
           "      return Status{StatusCode::kDecodeError, kDataAfterEndOfImage};\n    }\n",
           ""),
    # 8. Index of another file accepted: the file hash an index records is not compared, so an
    #    index of another file of the same geometry cuts this one's data at the wrong bits.
    Defect("index-file-hash-unchecked", "custom_op/csrc/index_builder.h",
           "  return index.file_hash == file_hash(data, size);",
           "  return true;"),
    # 9. CMYK to RGB: blue is computed from the magenta ink (a copy-paste slip).
    Defect("cmyk-blue-from-magenta", "custom_op/csrc/pixel_formats.h",
           "const uint8_t b = mul_div_255(p[2], p[3]);",
           "const uint8_t b = mul_div_255(p[1], p[3]);"),
    # 10. Resized crop's scale choice: the crop's width is compared with the output's height.
    Defect("scale-rule-width-vs-height", "custom_op/csrc/scale_rule.h",
           "crop_width * numerator >= static_cast<double>(out_width) * 8",
           "crop_width * numerator >= static_cast<double>(out_height) * 8"),
    # 11. Index store accepts a bad checksum: a damaged entry's index is handed to the decoder.
    Defect("store-checksum-ignored", "custom_op/_index/_store.py",
           "    if _seal(data[:-_DIGEST_BYTES]) != data[-_DIGEST_BYTES:]:\n"
           "        raise _Refused(\"its checksum does not match its bytes\")\n",
           ""),
    # 12. Sidecar ignores its version: an older sidecar (of indexes the core refuses) is read.
    Defect("sidecar-old-version-read", "custom_op/_index/_sidecar.py",
           "    if version != SIDECAR_VERSION:",
           "    if version > SIDECAR_VERSION:"),
    # 13. Resume off by one batch: the state counts the batch in flight as handed out, so a
    #     resumed epoch skips one batch.
    Defect("resume-skips-a-batch", "custom_op/lane/_resume.py",
           "return {\"epoch\": self.epoch, \"batches\": self.batches, \"seed\": self.lane.seed}",
           "return {\"epoch\": self.epoch, \"batches\": self.batches + 1, \"seed\": self.lane.seed}"),
    # 14. Sampler seed per rank: each rank shuffles with its own seed, so the ranks' shares
    #     overlap and miss indices.
    Defect("sampler-seed-per-rank", "custom_op/lane/_sampler.py",
           "derived_seed(self.seed, epoch, \"LaneBatchSampler order\")",
           "derived_seed(self.seed + self.rank, epoch, \"LaneBatchSampler order\")"),
    # 15. Fused resize's antialias flag dropped: Resize(antialias=False) decodes antialiased.
    Defect("fused-resize-always-antialias", "custom_op/_torchvision/_fused_resize.py",
           "            antialias, **_native_arguments(encoded),",
           "            True, **_native_arguments(encoded),"),
    # 16. Wrong colour mode mapping: the transforms' own table sends "gray" as "unchanged".
    Defect("fused-mode-gray-unchanged", "custom_op/_torchvision/_fused_resize.py",
           "{\"rgb\": 0, \"gray\": 1, \"unchanged\": 2}[options.mode]",
           "{\"rgb\": 0, \"gray\": 2, \"unchanged\": 1}[options.mode]"),
    # 17. A tar member's name: a GNU long name keeps its terminating NUL bytes.
    Defect("tar-long-name-keeps-nul", "custom_op/datasets/_tar_members.py",
           "name_override = _decoded(data.split(b\"\\0\", 1)[0])",
           "name_override = _decoded(data)"),
]
BY_NAME = {defect.name: defect for defect in DEFECTS}


class Outcome(NamedTuple):
    status: str   # CAUGHT, MISSED, BROKEN, TIMEOUT, NOT APPLIED (PASSED/FAILED for the baseline)
    detail: str   # the first failing test, or why the run says nothing about the defect
    seconds: float


# --- worktrees and builds ------------------------------------------------------------------


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


def add_worktree(tree: Path, commit: str) -> None:
    done = git("worktree", "add", "--detach", str(tree), commit)
    if done.returncode != 0:
        raise RuntimeError(f"git worktree add failed: {done.stderr.strip()}")


def remove_worktree(tree: Path) -> None:
    if git("worktree", "remove", "--force", str(tree)).returncode != 0:
        shutil.rmtree(tree, ignore_errors=True)
        git("worktree", "prune")  # forgets the worktree whose folder is now gone


def remove_leftovers() -> None:
    """Removes the worktrees and folders of runs killed before they could (their owner is dead)."""
    for folder in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            owner = int((folder / "owner").read_text())
            os.kill(owner, 0)
            continue  # a live run's
        except ProcessLookupError:
            pass
        except (OSError, ValueError):
            continue  # not ours, or not readable
        if (folder / "tree").exists():
            remove_worktree(folder / "tree")
        shutil.rmtree(folder, ignore_errors=True)


def build_key(tree: Path) -> str:
    """The extension's build key of the sources in ``tree`` (its _build_config, loaded by path:
    it imports only the standard library)."""
    path = tree / "custom_op" / "_core" / "_build_config.py"
    spec = importlib.util.spec_from_file_location(f"_mutant_build_config_{os.getpid()}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_key()


def seed_build(tree: Path, builds: Path) -> str:
    """Puts a build of ``tree``'s key into its custom_op/_build/ when one is known (one this
    script kept, or the checkout's own), so that only C++ defects build. Returns the key."""
    key = build_key(tree)
    for root in (builds, REPO / "custom_op" / "_build"):
        if all((root / key / name).is_file() for name in ("_C.abi3.so", "_C.abi3.so.json")):
            target = tree / "custom_op" / "_build"
            target.mkdir(parents=True, exist_ok=True)
            shutil.copytree(root / key, target / key)
            break
    return key


def keep_build(tree: Path, builds: Path, key: str) -> None:
    """Keeps the build the run made (HEAD's, for the Python defects after it)."""
    built = tree / "custom_op" / "_build" / key
    if (built / "_C.abi3.so").is_file() and not (builds / key).exists():
        shutil.copytree(built, builds / key)


# --- running the suite ---------------------------------------------------------------------


def suite_environment(run: Path, tree: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items()
           if name not in ("CUSTOM_OP_BUILD_DIR", "PYTEST_ADDOPTS", "PYTHONPATH")}
    for name in ("cache", "tmp"):
        (run / name).mkdir()
    env.update(XDG_CACHE_HOME=str(run / "cache"), TMPDIR=str(run / "tmp"), PYTHONPATH=str(tree))
    return env


def run_suite(tree: Path, env: dict[str, str]) -> tuple[Optional[int], str]:
    """The suite's exit status (None: stopped after TIMEOUT_SECONDS) and its output. It runs in
    a process group of its own, killed whatever ends the wait (a timeout, Ctrl-C, SIGTERM)."""
    process = subprocess.Popen([str(PYTHON), *SUITE], cwd=tree, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=TIMEOUT_SECONDS)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        return None, ""
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


#: The short test summary's lines (-ra): "FAILED <node id> - <message>", "ERROR <node id> ...".
_SUMMARY = re.compile(r"^(FAILED|ERROR) (.+?)(?: - .*)?$", re.MULTILINE)


def judge(code: Optional[int], output: str) -> tuple[str, str]:
    """(status, detail) of a defect's run."""
    if code is None:
        return "TIMEOUT", f"still running after {TIMEOUT_SECONDS} s"
    if code == 0:
        return "MISSED", "the quick suite passed"
    if "building the native extension failed" in output:
        return "BROKEN", "the defect does not compile"
    failures = _SUMMARY.findall(output)
    if not failures:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        return "BROKEN", f"exit {code} without a failing test: {tail[0]}"
    kind, node = failures[0]
    if "::" not in node:
        return "BROKEN", f"a collection error in {node}"
    return "CAUGHT", node if kind == "FAILED" else f"{node} (error)"


def judge_baseline(code: Optional[int], output: str) -> tuple[str, str]:
    """(PASSED or FAILED, detail) of HEAD's own run."""
    if code == 0:
        return "PASSED", "the quick suite passed"
    return "FAILED", judge(code, output)[1]


def run_one(defect: Optional[Defect], commit: str, builds: Path) -> Outcome:
    """Applies ``defect`` (None: the baseline, the commit as it is) in a new worktree of
    ``commit`` and runs the suite there."""
    started = time.monotonic()
    run = Path(tempfile.mkdtemp(prefix=PREFIX))
    tree = run / "tree"
    try:
        (run / "owner").write_text(str(os.getpid()))
        add_worktree(tree, commit)
        problem = apply(defect, tree) if defect is not None else None
        if problem:
            return Outcome("NOT APPLIED", problem, time.monotonic() - started)
        key = seed_build(tree, builds)
        code, output = run_suite(tree, suite_environment(run, tree))
        keep_build(tree, builds, key)
        judged = judge(code, output) if defect is not None else judge_baseline(code, output)
        if judged[0] not in ("CAUGHT", "PASSED"):  # the end of the output, to see why (stderr)
            print("\n".join("    | " + text for text in output.splitlines()[-25:]), file=sys.stderr)
        return Outcome(*judged, time.monotonic() - started)
    finally:
        if tree.exists():
            remove_worktree(tree)
        shutil.rmtree(run, ignore_errors=True)


def applied(defect: Defect, text: str) -> tuple[Optional[str], str]:
    """(why the defect does not apply to ``text`` or None, the text with the defect)."""
    count = text.count(defect.old)
    if count != 1:
        return f"its text occurs {count} times in {defect.path} (expected exactly once)", text
    return None, text.replace(defect.old, defect.new)


def apply(defect: Defect, tree: Path) -> Optional[str]:
    """Writes the defect into ``tree``; why it cannot (its text not found exactly once), or None."""
    path = tree / defect.path
    if not path.is_file():
        return f"{defect.path} does not exist"
    problem, text = applied(defect, path.read_text())
    if problem is None:
        path.write_text(text)
    return problem


def check_at_head(defect: Defect) -> str:
    """"applies" or why not, against HEAD's version of the defect's file (for --list)."""
    shown = git("show", f"HEAD:{defect.path}")
    if shown.returncode != 0:
        return f"{defect.path} is not in HEAD"
    return applied(defect, shown.stdout)[0] or "applies"


# --- the report ----------------------------------------------------------------------------


def line(name: str, path: str, outcome: Outcome) -> str:
    return f"{name:<32} {path:<42} {outcome.status:<11} {outcome.detail}  {outcome.seconds:.0f} s"


def summary(outcomes: list[Outcome], seconds: float) -> str:
    counts = {status: sum(o.status == status for o in outcomes)
              for status in ("CAUGHT", "MISSED", "BROKEN", "TIMEOUT", "NOT APPLIED")}
    shown = ", ".join(f"{count} {status.lower()}" for status, count in counts.items()
                      if count or status in ("CAUGHT", "MISSED"))
    return f"{len(outcomes)} defects: {shown}; {seconds / 60:.1f} min in all"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="defects to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the defects and exit")
    parser.add_argument("--baseline", action="store_true",
                        help="run HEAD unchanged first (always done when running all)")
    args = parser.parse_args(argv)
    if args.list:
        for defect in DEFECTS:
            print(f"{defect.name:<32} {defect.path:<42} {check_at_head(defect)}")
        return 0
    unknown = [name for name in args.names if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown defects {unknown}; --list lists them")
    if not PYTHON.exists():
        parser.error(f"no {PYTHON}: make deps creates it")
    everything = not args.names
    chosen = DEFECTS if everything else [BY_NAME[name] for name in args.names]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the cleanups run
    remove_leftovers()
    started = time.monotonic()
    commit = git("rev-parse", "HEAD").stdout.strip()  # every worktree's, whatever moves HEAD
    lines = [f"tests/mutants.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
             f"{len(chosen)} defects of HEAD {commit[:10]}, each in a fresh worktree, caught by:",
             f"  .venv/bin/python {' '.join(SUITE)}"]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory(prefix=PREFIX + "builds-") as builds:
        (Path(builds) / "owner").write_text(str(os.getpid()))
        if everything or args.baseline:
            baseline = run_one(None, commit, Path(builds))
            lines.append(line("baseline (HEAD unchanged)", "-", baseline))
            print(lines[-1], flush=True)
            if baseline.status != "PASSED":
                lines.append("The quick suite fails on HEAD: the defects' runs would say nothing.")
                print(lines[-1], flush=True)
                return finish(lines, everything, 1)
        outcomes = []
        for defect in chosen:
            outcomes.append(run_one(defect, commit, Path(builds)))
            lines.append(line(defect.name, defect.path, outcomes[-1]))
            print(lines[-1], flush=True)
    lines.append(summary(outcomes, time.monotonic() - started))
    print(lines[-1], flush=True)
    return finish(lines, everything, 0 if all(o.status == "CAUGHT" for o in outcomes) else 1)


def finish(lines: list[str], everything: bool, status: int) -> int:
    """Writes a run of every defect to tests/mutants.txt (overwritten); returns ``status``."""
    if everything:
        OUTPUT.write_text("\n".join(lines) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
