#!/usr/bin/env bash
# Runs sagemaker/train.py on this machine the way a SageMaker training job with
# distribution={"torch_distributed": {"enabled": True}} runs it: torchrun starts
# NPROC ranks, the SM_* variables point at local folders laid out like
# /opt/ml, and custom_op's build folder starts empty, as in a fresh training
# container. With WHEEL, custom_op comes from its wheel, installed first as the
# job's requirements.txt installs it, and nothing is built; without, from this
# checkout's sources, built on first use inside the job (launch.py --from-source).
#
#   sagemaker/run_local.sh [train.py hyperparameters ...]     (or: make sagemaker-local)
#
# Arguments go to train.py after the defaults below, so they override them
# (e.g. --max-steps 0 --epochs 3). Environment:
#   PY          the Python to use (default .venv/bin/python, else python3)
#   WORK_DIR    where to put the job's folders, kept afterwards (default: a new
#               temporary folder, removed when the script ends)
#   NPROC       ranks (default 2); NUM_IMAGES (default 64), IMAGE_HEIGHT x IMAGE_WIDTH
#               of the generated JPEGs (default 180 x 240)
#   DATA_FORMAT folder (default: an ImageFolder tree) or webdataset (tar shards of
#               SAMPLES_PER_SHARD samples, default 8, read by train.py --data-format webdataset)
#   PREPARE     none (default) or processing (with DATA_FORMAT=webdataset): the shards go
#               first through simulate_processing.py --verify, the Processing job of
#               launch_prepare.py as PREPARE_INSTANCES (default 2) local instances with their
#               own empty build folder, and the job trains on the union of the instances'
#               outputs (its s3-output folder, copied into the channel as SageMaker downloads
#               an S3 prefix)
#   WHEEL       a custom_op wheel (make wheel; it must run on $PY's torch): installed into
#               a venv in the work folder that sees $PY's packages but not the checkout's
#               custom_op (the container's image + requirements.txt); the job runs there
# Uses CPUs (gloo) here; on a GPU machine train.py picks nccl.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
NPROC="${NPROC:-2}"
NUM_IMAGES="${NUM_IMAGES:-64}"
IMAGE_HEIGHT="${IMAGE_HEIGHT:-180}"
IMAGE_WIDTH="${IMAGE_WIDTH:-240}"
DATA_FORMAT="${DATA_FORMAT:-folder}"
SAMPLES_PER_SHARD="${SAMPLES_PER_SHARD:-8}"
case "$DATA_FORMAT" in
  folder) DATASET_ARGS=(); TRAIN_ARGS=() ;;
  webdataset) DATASET_ARGS=(--shards --samples-per-shard "$SAMPLES_PER_SHARD")
              TRAIN_ARGS=(--data-format webdataset) ;;
  *) echo "run_local.sh: DATA_FORMAT must be folder or webdataset, not '$DATA_FORMAT'" >&2; exit 2 ;;
esac
PREPARE="${PREPARE:-none}"
PREPARE_INSTANCES="${PREPARE_INSTANCES:-2}"
case "$PREPARE" in
  none) ;;
  processing)
    if [ "$DATA_FORMAT" != webdataset ]; then
      echo "run_local.sh: PREPARE=processing needs DATA_FORMAT=webdataset (it prepares shards)" >&2
      exit 2
    fi ;;
  *) echo "run_local.sh: PREPARE must be none or processing, not '$PREPARE'" >&2; exit 2 ;;
esac
KEPT="kept"
if [ -z "${WORK_DIR:-}" ]; then
  WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/custom_op-sagemaker-local.XXXXXX")"
  trap 'rm -rf "$WORK_DIR"' EXIT
  KEPT="removed now (set WORK_DIR to keep them)"
fi
mkdir -p "$WORK_DIR"
WORK_DIR="$(cd "$WORK_DIR" && pwd)"

# The container's layout: /opt/ml/input/data/<channel>, /opt/ml/model, /opt/ml/output/data.
export SM_CHANNELS='["train"]'
export SM_CHANNEL_TRAIN="$WORK_DIR/input/data/train"
export SM_MODEL_DIR="$WORK_DIR/model"
export SM_OUTPUT_DATA_DIR="$WORK_DIR/output/data"
export SM_HOSTS='["algo-1"]'
export SM_CURRENT_HOST=algo-1
export SM_NUM_GPUS="$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
export SM_NUM_CPUS="$(nproc 2>/dev/null || echo 1)"
# A fresh, empty build folder: the cold start every training job has.
export CUSTOM_OP_BUILD_DIR="$WORK_DIR/custom_op_build"
rm -rf "$CUSTOM_OP_BUILD_DIR"
mkdir -p "$CUSTOM_OP_BUILD_DIR"
if [ -n "${WHEEL:-}" ]; then
  # The image's packages, as links, without this checkout's editable custom_op.
  SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$WORK_DIR/image-packages"
  for entry in "$SITE"/*; do
    case "$(basename "$entry")" in
      custom_op*|__editable__*|*.pth) ;;
      *) ln -sfn "$entry" "$WORK_DIR/image-packages/$(basename "$entry")" ;;
    esac
  done
  "$PY" -m venv --without-pip "$WORK_DIR/job-venv"
  JOB_SITE="$("$WORK_DIR/job-venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$WORK_DIR/image-packages" > "$JOB_SITE/_image_packages.pth"
  echo "run_local.sh: installing $WHEEL (the job's requirements.txt)"
  installing=$(date +%s.%N)
  "$PY" -m pip --python "$WORK_DIR/job-venv/bin/python" install -q --no-index --no-deps "$WHEEL"
  echo "run_local.sh: installed in $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $installing }") s"
  PY="$WORK_DIR/job-venv/bin/python"
else
  # In a --from-source job custom_op sits next to train.py in source_dir; here, at the repo root.
  export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi

echo "run_local.sh: work folder $WORK_DIR"
# Without PREPARE the dataset is the channel; with it, the Processing job's input.
DATASET_DIR="$SM_CHANNEL_TRAIN"
[ "$PREPARE" = none ] || DATASET_DIR="$WORK_DIR/shards"
"$PY" sagemaker/make_dataset.py "$DATASET_DIR" --images "$NUM_IMAGES" \
  --height "$IMAGE_HEIGHT" --width "$IMAGE_WIDTH" ${DATASET_ARGS[@]+"${DATASET_ARGS[@]}"}
if [ "$PREPARE" = processing ]; then
  echo "run_local.sh: simulate_processing.py: $PREPARE_INSTANCES instances prepare the shards"
  # A separate job in its own container: its own cold build, not the training job's folder.
  CUSTOM_OP_BUILD_DIR="$WORK_DIR/processing/build" "$PY" sagemaker/simulate_processing.py \
    "$WORK_DIR/processing" --shards-from "$DATASET_DIR" --instances "$PREPARE_INSTANCES" --verify
  mkdir -p "$(dirname "$SM_CHANNEL_TRAIN")"
  cp -R "$WORK_DIR/processing/s3-output" "$SM_CHANNEL_TRAIN"
fi

echo "run_local.sh: torchrun --standalone --nproc_per_node $NPROC sagemaker/train.py"
started=$(date +%s)
# python -m torch.distributed.run is torchrun, from the same environment as $PY.
"$PY" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" sagemaker/train.py \
  --epochs 2 --max-steps 8 --batch-size 8 --crop-size 128 --num-workers 1 --log-interval 2 \
  ${TRAIN_ARGS[@]+"${TRAIN_ARGS[@]}"} "$@"
echo "run_local.sh: the job took $(( $(date +%s) - started )) s; model: $SM_MODEL_DIR/model.pth," \
  "metrics: $SM_OUTPUT_DATA_DIR/metrics.json: $KEPT"
built="$(find "$CUSTOM_OP_BUILD_DIR" -name '_C*.so' | wc -l)"
echo "run_local.sh: modules built in the job: $built"
