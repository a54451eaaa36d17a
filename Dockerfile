# custom_op from its wheel, on an image with no compiler and no libjpeg headers:
# nothing is compiled, neither at install nor at the first decode.
#
#   make wheel                              # dist/custom_op-*.whl, on a machine with g++
#   docker build -t custom_op .             # this file; the context is dist/ alone (.dockerignore)
#   docker run --rm custom_op python -m custom_op.check
#
# python:3.11-slim has neither gcc nor g++ nor libjpeg's headers. The wheel links
# libjpeg-turbo 3.1 statically and needs only torch's own libraries and the C/C++
# runtime; a CUDA training image (SageMaker's, NVIDIA's) works the same way with
# its own torch, any release from 2.10 on. See docs/install.md, "The wheel".
FROM python:3.11-slim

# torch first (its CPU build: 190 MB instead of several GB), then the wheel, whose
# dependencies that torch already satisfies.
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu \
        torch==2.14.1 torchvision==0.29.1
COPY dist/ /tmp/dist/
RUN pip install --no-cache-dir /tmp/dist/custom_op-*.whl && rm -rf /tmp/dist

# Fails the image build, not a job, if the installed module does not load and decode here.
RUN for compiler in cc c++ gcc g++; do \
      if command -v "$compiler"; then echo "unexpected compiler: $compiler"; exit 1; fi; \
    done \
 && python -m custom_op.build --verify
