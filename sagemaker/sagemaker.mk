# Make targets for the SageMaker entry point; the Makefile includes this file.
#
# make sagemaker-local      - run sagemaker/train.py with torchrun, 2 ranks on this
#                             machine, laid out as in a SageMaker job, with an empty
#                             custom_op build folder (the build happens in the job)
# make sagemaker-local-shards - the same job reading WebDataset tar shards
#                             (train.py --data-format webdataset)
# make sagemaker-at-scale-local - the two end to end: shards from make_dataset.py,
#                             prepared (--verify) by sagemaker-processing-local's 2
#                             instances, the union of their outputs trained on by
#                             sagemaker-local-shards' 2-rank job (run_local.sh PREPARE=processing)
# make sagemaker-dry-run    - print the job launch.py would start and its source_dir
#                             files (no SDK, no AWS)
# make sagemaker-processing-local - launch_prepare.py's Processing job on this machine:
#                             shards dealt to 2 instances as ShardedByS3Key does, prepared
#                             (--verify) by each, the union checked against one machine's run
# SAGEMAKER_LOCAL_ARGS      - extra train.py hyperparameters, e.g. "--max-steps 0 --epochs 3"
# SAGEMAKER_LAUNCH_ARGS     - launch.py options, e.g. "--instance-type ml.g5.12xlarge"
# SAGEMAKER_WORK_DIR        - where sagemaker-local (and sagemaker-processing-local, in
#                             its processing/ subfolder) puts the job's folders (default: a
#                             new temporary folder, removed afterwards)
# SAGEMAKER_PROCESSING_ARGS - simulate_processing.py options, e.g. "--instances 3 --images 96"
# SAGEMAKER_WHEEL           - sagemaker-local runs the job from this custom_op wheel, installed
#                             first as the job's requirements.txt installs it (e.g.
#                             SAGEMAKER_WHEEL=$(ls dist/*.whl) after make wheel): nothing is built

PY ?= .venv/bin/python
SAGEMAKER_LOCAL_ARGS ?=
SAGEMAKER_LAUNCH_ARGS ?=
SAGEMAKER_WORK_DIR ?=
SAGEMAKER_PROCESSING_ARGS ?=
SAGEMAKER_WHEEL ?=

.PHONY: sagemaker-local sagemaker-local-shards sagemaker-at-scale-local sagemaker-dry-run \
	sagemaker-processing-local

sagemaker-local: deps
	PY="$(PY)" WORK_DIR="$(SAGEMAKER_WORK_DIR)" WHEEL="$(SAGEMAKER_WHEEL)" \
		bash sagemaker/run_local.sh $(SAGEMAKER_LOCAL_ARGS)

sagemaker-local-shards: deps
	DATA_FORMAT=webdataset PY="$(PY)" WORK_DIR="$(SAGEMAKER_WORK_DIR)" bash sagemaker/run_local.sh $(SAGEMAKER_LOCAL_ARGS)

sagemaker-at-scale-local: deps
	DATA_FORMAT=webdataset PREPARE=processing PY="$(PY)" WORK_DIR="$(SAGEMAKER_WORK_DIR)" \
		bash sagemaker/run_local.sh $(SAGEMAKER_LOCAL_ARGS)

sagemaker-dry-run:
	$(PY) sagemaker/launch.py --dry-run $(SAGEMAKER_LAUNCH_ARGS)

sagemaker-processing-local: deps
	@work="$(SAGEMAKER_WORK_DIR)"; [ -n "$$work" ] || work=$$(mktemp -d -t custom_op-processing-XXXXXX); \
	status=0; $(PY) sagemaker/simulate_processing.py "$$work/processing" --verify $(SAGEMAKER_PROCESSING_ARGS) || status=$$?; \
	[ -n "$(SAGEMAKER_WORK_DIR)" ] || rm -rf "$$work"; exit $$status
